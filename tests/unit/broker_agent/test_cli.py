"""`broker-agent` argument and config handling (no network)."""

from __future__ import annotations

import asyncio
import io
import logging
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from broker_agent.agent import AgentStats, percentile
from broker_agent.cli import (
    DEFAULT_LAG_PROBABILITY,
    build_fleet_parser,
    build_parser,
    main,
    spec_from_args,
)
from broker_agent.fleet import Fleet
from kraft.config import ConfigError

URLS = "http://127.0.0.1:1,http://127.0.0.1:2/"


def single(*extra: str):  # noqa: ANN201
    return spec_from_args(
        build_parser().parse_args(["--broker-id", "4", "--controllers", URLS, *extra]), False
    )


def fleet(*extra: str):  # noqa: ANN201
    args = build_fleet_parser().parse_args(
        ["--count", "3", "--first-id", "10", "--controllers", URLS, *extra]
    )
    return spec_from_args(args, True)


def test_defaults_are_kafkas() -> None:
    spec = single()
    assert spec.first_id == 4 and spec.count == 1
    assert spec.controllers == ("http://127.0.0.1:1", "http://127.0.0.1:2")
    s = spec.settings
    assert s.heartbeat_interval_ms == 2000
    assert s.request_timeout_ms == 4500  # half the 9 s session, as Kafka's heartbeat channel
    assert s.controlled_shutdown_timeout_ms == 30_000
    assert s.isr.expansion_enabled and s.isr.lag_probability == 0.0
    assert spec.raft.fetch_max_wait_ms == 500


def test_overrides_and_config_file(tmp_path) -> None:  # noqa: ANN001
    cfg = tmp_path / "broker.properties"
    cfg.write_text("broker.heartbeat.interval.ms=500\nbroker.rack=r1\nsome.other.key=1\n")
    spec = single(
        "--config", str(cfg), "--override", "broker.heartbeat.interval.ms=700", "--rack", "r2"
    )
    assert spec.settings.heartbeat_interval_ms == 700  # --override wins over the file
    assert spec.settings.rack == "r2"  # the flag wins over both
    # register/heartbeat requests time out after half the session
    assert (
        single("--override", "broker.session.timeout.ms=6000").settings.request_timeout_ms == 3000
    )


def test_simulated_lag_flag_and_fleet_default() -> None:
    assert single("--simulate-lag").settings.isr.lag_probability == DEFAULT_LAG_PROBABILITY
    assert (
        single("--override", "broker.simulated.lag.probability=0.3").settings.isr.lag_probability
        == 0.3
    )
    assert fleet().settings.isr.lag_probability == DEFAULT_LAG_PROBABILITY  # on in fleets
    assert fleet("--no-simulate-lag").settings.isr.lag_probability == 0.0
    assert fleet().count == 3 and fleet().first_id == 10


@pytest.mark.parametrize(
    "override",
    [
        "broker.heartbeat.interval.ms=abc",
        "broker.simulated.lag.probability=2",
        "broker.simulated.lag.probability=x",
        "broker.heartbeat.interval.ms=9000",  # not below the session timeout
    ],
)
def test_bad_values_are_errors(override: str) -> None:
    with pytest.raises(ConfigError):
        single("--override", override)


@contextmanager
def root_logging_kept() -> Iterator[None]:
    """`main` sets the process's logging up (a root handler on the sys.stderr of
    the moment, which capsys closes after the test): in the suite's process the
    handler would outlive the test, and py4j's INFO line when Spark's gateway
    connections close later would hit the closed stream ('--- Logging error ---'
    under `make test-random`)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def test_user_errors_exit_2_without_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    with root_logging_kept():
        assert main(["--broker-id", "4", "--controllers", "nope"]) == 2
        err = capsys.readouterr().err
        assert "must start with http" in err and "Traceback" not in err
        assert main(["--broker-id", "4", "--controllers", URLS, "--override", "x"]) == 2
    # an OverflowError traceback from bind() (the status port), a registration the
    # controller refused (the listener port): both argparse's usage error now
    one = ["--broker-id", "4", "--controllers", URLS]
    fleet = ["fleet", "--count", "2", "--first-id", "4", "--controllers", URLS]
    for argv in (
        [*one, "--status-port", "70000"],
        [*one, "--listener-port", "99999"],
        [*fleet, "--status-port", "-1"],
    ):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "a port is in 0..65535" in err and "Traceback" not in err, err
    assert not [h for h in logging.getLogger().handlers if type(h) is logging.StreamHandler], (
        "main's root handler outlived the test"
    )


def test_percentile() -> None:
    assert percentile([], 0.99) is None
    values = [float(i) for i in range(1, 101)]
    assert percentile(values, 0.99) == 100.0
    assert percentile(values, 0.5) == 51.0
    stats = AgentStats()
    for v in values:
        stats.record(v)
    assert len(stats.take_window()) == 100 and not stats.window


def test_heartbeat_latencies_since_a_count() -> None:
    stats = AgentStats()
    for v in range(1, 11):
        stats.record(float(v))
    mark = stats.heartbeats
    for v in range(101, 201):
        stats.record(float(v))
    after = stats.since(mark)
    assert after["count"] == 100 and after["complete"] and after["heartbeats"] == 110
    assert after["p50_ms"] == 151.0 and after["p99_ms"] == 200.0 and after["max_ms"] == 200.0
    assert stats.since(0)["count"] == 110
    empty = stats.since(110)
    assert empty["count"] == 0 and empty["complete"] and empty["p99_ms"] is None
    # heartbeats that already left the bounded history: figures of what is kept
    small = AgentStats(history=deque(maxlen=5))
    for v in range(20):
        small.record(float(v))
    partial = small.since(0)
    assert partial["count"] == 5 and not partial["complete"] and partial["max_ms"] == 19.0


async def test_every_agent_start_has_a_fresh_incarnation() -> None:
    # Agents are built (not run): a fleet gives each its own incarnation, and a new
    # Fleet (a process restart) gives new ones again.
    spec = fleet()

    async def incarnations() -> list[str]:
        f = Fleet(spec, out=io.StringIO())
        f.shutdown()  # stop before anything is sent
        task = asyncio.create_task(f.run())
        await asyncio.wait_for(task, 10)
        return [a.incarnation_id for a in f.agents]

    first = await incarnations()
    second = await incarnations()
    assert len(set(first)) == 3 and not set(first) & set(second)


def test_a_data_dir_in_use_is_refused_before_anything_runs(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:  # noqa: ANN001
    """One agent per --data-dir (KIP-966's clean-shutdown broker epoch lives there):
    a second agent on a held directory exits 1 naming the holder; a fleet's {id}
    directories are each held, and the one in use is named."""
    import os

    from broker_agent import clean_shutdown
    from kraft.raft_shell.dir_lock import hold_dir_lock

    mine = tmp_path / "broker-4"
    mine.mkdir()
    clean_shutdown.write(mine, 17)  # the holder's, from its last controlled shutdown
    with hold_dir_lock(mine, "broker"):
        code = main(["--broker-id", "4", "--controllers", URLS, "--data-dir", str(mine)])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(f"broker-agent: {mine} is in use by process {os.getpid()} ")
    assert "one data directory per broker" in err
    assert clean_shutdown.take(mine) == 17  # not taken by the refused agent

    with hold_dir_lock(tmp_path / "b-11", "broker"):
        code = main(
            ["fleet", "--count", "3", "--first-id", "10", "--controllers", URLS,
             "--data-dir", str(tmp_path / "b-{id}")]
        )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and f"{tmp_path / 'b-11'} is in use" in err
    # the directories it took before the refusal are released again
    with hold_dir_lock(tmp_path / "b-10", "broker"):
        pass
