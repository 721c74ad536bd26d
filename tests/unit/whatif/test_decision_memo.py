"""The what-if engine's decision memo: its key holds everything the controller's
AlterPartition reads.

Pairs of controller states are drawn (seeded): a base, and a variant that
redraws some of the fields the key holds and most of those it leaves out
(epochs, broker epochs, a broker outside the partition, the unclean setting,
the session, the time). Wherever the two keys are equal, the controller's
answers (records, or the error it refuses with) must be equal too: a field
missing from the key shows up as a pair with equal keys and different answers.
"""

from __future__ import annotations

import random
from typing import Any

from kraft.controller.configs import MIN_INSYNC_REPLICAS
from kraft.controller.errors import ApiError
from kraft.controller.quorum_controller import ControllerConfig, QuorumController
from metadata_log.records import (
    ELIGIBLE_LEADER_REPLICAS_FEATURE,
    LATEST_METADATA_VERSION,
    METADATA_VERSION_FEATURE,
    RECOVERED,
    RECOVERING,
    TOPIC_RESOURCE,
    ConfigRecord,
    FeatureLevelRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from spark_replay.whatif.engine import decision_key, leader_request

TID = "memo-topic-id"
STATES = ("unfenced", "fenced", "shutting")
# the fields the key holds, and the others (which must not change an answer)
KEYED = (
    "replicas",
    "isr",
    "leader",
    "elr",
    "last_known_elr",
    "recovery_state",
    "adding",
    "removing",
    "target",
    "recovery",
    "states",
    "topic_min_isr",
    "default_min_isr",
    "elr_feature",
)
NOISE = (
    "leader_epoch",
    "partition_epoch",
    "broker_epochs",
    "other_broker",
    "unclean",
    "topic_unclean",
    "session",
    "now",
)


def _draw(rng: random.Random, name: str) -> Any:
    match name:
        case "replicas":
            return rng.choice([(1, 2, 3), (2, 3, 1), (1, 2), (3, 1)])
        case "isr" | "target" | "elr":
            return tuple(r for r in (1, 2, 3) if rng.random() < 0.6)
        case "leader":
            return rng.choice((1, 2, 3))
        case "last_known_elr":
            return rng.choice([(), (), (1,), (2,), (3,)])
        case "recovery_state" | "recovery":
            return RECOVERING if rng.random() < 0.2 else RECOVERED
        case "adding":
            return rng.choice([(), (), (), (2,), (3,)])
        case "removing":
            return rng.choice([(), (), (), (1,), (3,)])
        case "states":
            return {b: rng.choice(STATES) for b in (1, 2, 3)}
        case "topic_min_isr":
            return rng.choice([None, 1, 2, 3])
        case "default_min_isr":
            return rng.choice([1, 2, 3])
        case "elr_feature":
            return rng.choice([0, 1])
        case "leader_epoch" | "partition_epoch":
            return rng.randrange(10)
        case "broker_epochs":
            return {b: rng.randrange(100, 200) for b in (1, 2, 3, 4)}
        case "other_broker":
            return rng.choice(STATES)
        case "unclean":
            return rng.random() < 0.5
        case "topic_unclean":
            return rng.choice([None, "true", "false"])
        case "session":
            return rng.choice([3000, 9000, 30000])
        case "now":
            return rng.randrange(10**6)
    raise AssertionError(name)


def _repair(c: dict[str, Any]) -> dict[str, Any]:
    """A state the controller can hold: an ISR of replicas with the leader in it,
    an ELR outside the ISR, a target holding the leader."""
    replicas = c["replicas"]
    isr = tuple(r for r in c["isr"] if r in replicas) or (replicas[0],)
    leader = c["leader"] if c["leader"] in isr else isr[0]
    adding = tuple(r for r in c["adding"] if r in replicas)
    removing = tuple(r for r in c["removing"] if r in replicas and r not in adding)
    return {
        **c,
        "isr": isr,
        "leader": leader,
        "elr": tuple(r for r in c["elr"] if r in replicas and r not in isr),
        "last_known_elr": tuple(r for r in c["last_known_elr"] if r in replicas),
        "adding": adding,
        "removing": removing,
        "target": tuple(r for r in replicas if r in c["target"] or r == leader),
    }


def _case(rng: random.Random, base: dict[str, Any] | None = None) -> dict[str, Any]:
    if base is None:
        return _repair({n: _draw(rng, n) for n in (*KEYED, *NOISE)})
    c = dict(base)
    for n in KEYED:
        if rng.random() < 0.07:
            c[n] = _draw(rng, n)
    for n in NOISE:
        if rng.random() < 0.8:
            c[n] = _draw(rng, n)
    return _repair(c)


def _ask(c: dict[str, Any]) -> tuple[tuple[Any, ...], Any]:
    """The memo's key for the case, and the controller's answer."""
    ctl = QuorumController(
        ControllerConfig(
            node_id=3000,
            controller_ids=frozenset(),
            cluster_id="what-if",
            session_timeout_ms=c["session"],
            unclean_leader_election_enable=c["unclean"],
            min_insync_replicas=c["default_min_isr"],
            bootstrap_eligible_leader_replicas_version=0,
        ),
        random.Random(1),
    )
    states = {**c["states"], 4: c["other_broker"]}
    records: list[Any] = [
        FeatureLevelRecord(METADATA_VERSION_FEATURE, LATEST_METADATA_VERSION),
        FeatureLevelRecord(ELIGIBLE_LEADER_REPLICAS_FEATURE, c["elr_feature"]),
        *(
            RegisterBrokerRecord(
                b,
                f"incarnation-{b}",
                c["broker_epochs"][b],
                fenced=states[b] == "fenced",
                in_controlled_shutdown=states[b] == "shutting",
            )
            for b in (1, 2, 3, 4)
        ),
        TopicRecord("t", TID),
    ]
    if c["topic_min_isr"] is not None:
        records.append(
            ConfigRecord(TOPIC_RESOURCE, "t", MIN_INSYNC_REPLICAS, str(c["topic_min_isr"]))
        )
    if c["topic_unclean"] is not None:
        records.append(
            ConfigRecord(TOPIC_RESOURCE, "t", "unclean.leader.election.enable", c["topic_unclean"])
        )
    records.append(
        PartitionRecord(
            TID,
            0,
            c["replicas"],
            c["isr"],
            removing_replicas=c["removing"],
            adding_replicas=c["adding"],
            leader=c["leader"],
            leader_recovery_state=c["recovery_state"],
            leader_epoch=c["leader_epoch"],
            partition_epoch=c["partition_epoch"],
            eligible_leader_replicas=c["elr"],
            last_known_elr=c["last_known_elr"],
        )
    )
    for offset, r in enumerate(records):
        ctl.replay(r, offset)
    ctl.activate(c["now"])
    p = ctl.image.topics[TID].partitions[0]
    key = decision_key(ctl, TID, 0, c["target"], c["recovery"], p)
    req = leader_request(ctl, TID, 0, c["target"], c["recovery"], p)
    try:
        return key, ctl.alter_partition(req, c["now"]).records
    except ApiError as e:
        return key, e.code


def test_equal_keys_get_equal_answers_and_the_answers_vary() -> None:
    rng = random.Random(20261126)
    equal_keys = 0
    answers: set[Any] = set()
    for _ in range(3000):
        base = _case(rng)
        variant = _case(rng, base)
        (k1, a1), (k2, a2) = _ask(base), _ask(variant)
        answers.add(a1 if isinstance(a1, str) else a1[:1])
        if k1 == k2:
            equal_keys += 1
            assert a1 == a2, (base, variant)
    # not vacuous: many pairs differ only outside the key, and the states drawn
    # get records, no record, and refusals
    assert equal_keys > 500, equal_keys
    assert len(answers) > 100 and any(isinstance(a, str) for a in answers)
    assert () in answers
