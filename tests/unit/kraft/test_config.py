"""Kafka-style config: file, overrides, unused keys, bad values named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kraft.config import CONTROLLER_KEYS, ConfigError, load_config, parse_properties, parse_voters


def test_defaults_are_kafkas() -> None:
    c = load_config(CONTROLLER_KEYS)
    assert c["controller.quorum.election.timeout.ms"] == 1000
    assert c["controller.quorum.fetch.timeout.ms"] == 2000
    assert c["broker.heartbeat.interval.ms"] == 2000
    assert c["broker.session.timeout.ms"] == 9000
    assert c["metadata.max.idle.interval.ms"] == 500
    assert c["metadata.log.max.record.bytes.between.snapshots"] == 20 * 1024 * 1024
    assert c["metadata.max.retention.bytes"] == 100 * 1024 * 1024
    assert c["unclean.leader.election.enable"] is False


def test_file_then_override_then_flag(tmp_path: Path) -> None:
    f = tmp_path / "server.properties"
    f.write_text(
        "# comment\n! also a comment\nbroker.session.timeout.ms=5000\n"
        "controller.quorum.voters = 1@127.0.0.1:9001,\\\n  2@127.0.0.1:9002\n"
        "log.retention.hours: 12\n"
    )
    c = load_config(CONTROLLER_KEYS, str(f), ["broker.session.timeout.ms=6000"], {"node.id": 2})
    assert c["broker.session.timeout.ms"] == 6000
    assert c["controller.quorum.voters"] == {1: ("127.0.0.1", 9001), 2: ("127.0.0.1", 9002)}
    assert c["node.id"] == 2
    assert c.unused == ["log.retention.hours"]


@pytest.mark.parametrize(
    "override, message",
    [
        ("broker.session.timeout.ms=soon", "broker.session.timeout.ms: 'soon' is not an integer"),
        ("broker.session.timeout.ms=0", "must be >= 1"),
        ("unclean.leader.election.enable=yes", "is not true or false"),
        ("controller.quorum.voters=1@host", "not of the form ID@HOST:PORT"),
        ("nonsense", "expected key=value"),
    ],
)
def test_bad_values_name_the_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(CONTROLLER_KEYS, overrides=[override])


def test_missing_file_and_bad_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(CONTROLLER_KEYS, str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match=r"x.properties:2: expected key=value"):
        parse_properties("a=1\njunk line\n", "x.properties")


def test_voters() -> None:
    assert parse_voters("1@[::1]:9000") == {1: ("::1", 9000)}
    with pytest.raises(ConfigError, match="appears twice"):
        parse_voters("1@a:1,1@b:2")
    # each was accepted: a voter on no host, two voters on one address, a lost entry
    for text, needle in (
        ("1@:5000", "voter '1@:5000' has no host"),
        ("1@[]:5000", "has no host"),
        ("1@h:5000,2@h:5000", "voters 1 and 2 have the same address h:5000"),
        ("1@h:5000,,2@h:5001", "has an empty entry"),
        ("1@h:5000,", "has an empty entry"),
        ("2147483648@h:5000", "has a bad id or port"),
        (" ", "the voter list is empty"),
    ):
        with pytest.raises(ConfigError, match=re.escape(needle)):
            parse_voters(text)


def test_an_unknown_key_is_a_warning_and_another_roles_key_is_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A typo in a properties file used to be one INFO line among many."""
    import logging

    from kraft.config import BROKER_KEYS, CONTROLLER_KEYS

    log = logging.getLogger("test.config")
    overrides = ["broker.session.timeout.msx=6000", "broker.heartbeat.interval.ms=500"]
    broker_only = next(k for k in BROKER_KEYS if k not in CONTROLLER_KEYS)
    config = load_config(CONTROLLER_KEYS, None, [*overrides, f"{broker_only}=1"])
    with caplog.at_level(logging.INFO, logger="test.config"):
        config.log_unused(log)
    levels = {r.key: (r.levelname, r.event) for r in caplog.records}
    assert levels == {
        "broker.session.timeout.msx": ("WARNING", "config_unknown"),
        broker_only: ("INFO", "config_unused"),
    }
