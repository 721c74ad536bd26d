"""The typed configs take their defaults from the config registry (kraft.config),
the one place a default is stated, and their values from a loaded config."""

from __future__ import annotations

import dataclasses

from kraft.config import CONTROLLER_KEYS, KEYS, load_config
from kraft.controller.quorum_controller import CONFIG_KEYS, ControllerConfig
from kraft.controller.topic_policy import TopicLimits
from kraft.raft.config import CONFIG_KEYS as RAFT_CONFIG_KEYS
from kraft.raft.config import RaftConfig


def test_every_configured_field_defaults_to_the_registry() -> None:
    defaults = ControllerConfig(node_id=1, controller_ids=frozenset({1}), cluster_id="c")
    for field, key in CONFIG_KEYS.items():
        assert key in CONTROLLER_KEYS
        assert getattr(defaults, field) == KEYS[key].default, field
    for field, key in RAFT_CONFIG_KEYS.items():
        assert key in CONTROLLER_KEYS
        assert getattr(RaftConfig(), field) == KEYS[key].default, field
    assert ControllerConfig.from_config(None, 1, frozenset({1}), "c") == defaults
    assert RaftConfig.from_config(None) == RaftConfig()
    assert TopicLimits.from_config(None) == TopicLimits()


def test_from_config_takes_the_configured_values() -> None:
    config = load_config(
        CONTROLLER_KEYS,
        overrides=[
            "broker.session.timeout.ms=4000",
            "min.insync.replicas=2",
            "controller.quorum.fetch.timeout.ms=3000",
            "max.topics=7",
        ],
    )
    c = ControllerConfig.from_config(config, 1, frozenset({1, 2}), "c")
    assert (c.session_timeout_ms, c.min_insync_replicas, c.max_topics) == (4000, 2, 7)
    assert c.controller_ids == frozenset({1, 2}) and c.cluster_id == "c"
    raft = RaftConfig.from_config(config)
    assert raft == dataclasses.replace(RaftConfig(), fetch_timeout_ms=3000)
    assert TopicLimits.from_config(config).max_topics == 7
