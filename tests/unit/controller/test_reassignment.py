"""Partition reassignment (KIP-455) through the controller's public commands.

Scenarios from KIP-455 and Kafka's ReplicationControlManagerTest /
PartitionChangeBuilderTest, in our own words: a reassignment starts as the union
of the old and new replicas, completes when every adding replica is in the ISR
(moving the leader off a removed replica), a cancel goes back, and a bad plan
is refused whole with Kafka's error names and nothing written.
"""

from __future__ import annotations

from typing import Any

import pytest

from kraft.controller.errors import ApiError
from kraft.controller.reassignment import ReassignmentReplicas, ReassignmentRevert
from kraft.controller.requests import (
    AlterConfigsRequest,
    AlterPartitionReassignmentsRequest,
    ReassignmentTarget,
    parse_reassignment_plan,
)
from metadata_log.image import PartitionRegistration
from metadata_log.records import PartitionChangeRecord
from tests.unit.controller.harness import Harness


def cluster(n: int = 6) -> Harness:
    """Brokers 1..n; topic foo: [1,2,3] and [3,2,1]; topic bar: [1,2,3]."""
    h = Harness(session_timeout_ms=1000)
    for b in range(1, n + 1):
        h.unfenced_broker(b)
    h.create_topic("foo", [[1, 2, 3], [3, 2, 1]])
    h.create_topic("bar", [[1, 2, 3]])
    return h


def plan(*entries: tuple[str, int, list[int] | None]) -> AlterPartitionReassignmentsRequest:
    return AlterPartitionReassignmentsRequest(
        tuple(ReassignmentTarget(t, p, None if r is None else tuple(r)) for t, p, r in entries)
    )


def reassign(h: Harness, *entries: tuple[str, int, list[int] | None]) -> dict[str, Any]:
    return h.apply(h.c.alter_partition_reassignments(plan(*entries), 0)).reply


def state(h: Harness, topic: str = "foo", pid: int = 0) -> tuple:
    p = h.partition(topic, pid)
    return p.replicas, p.adding_replicas, p.removing_replicas, p.isr, p.leader


def test_a_reassignment_starts_as_the_union_with_adding_and_removing() -> None:
    h = cluster()
    reply = reassign(h, ("foo", 0, [4, 5, 6]))
    assert state(h) == ((4, 5, 6, 1, 2, 3), (4, 5, 6), (1, 2, 3), (1, 2, 3), 1)
    entry = {
        "topic": "foo",
        "partition": 0,
        "replicas": [4, 5, 6, 1, 2, 3],
        "adding_replicas": [4, 5, 6],
        "removing_replicas": [1, 2, 3],
    }
    assert reply == {"partitions": [entry]}
    assert h.c.list_partition_reassignments() == [entry]


def test_a_reassignment_completes_when_every_adding_replica_joined_the_isr() -> None:
    h = cluster()
    reassign(h, ("foo", 0, [4, 5, 6]))
    epoch = h.partition("foo", 0).leader_epoch
    h.alter_isr("foo", 0, [1, 2, 3, 4, 5])  # 6 has not caught up yet
    assert h.partition("foo", 0).reassigning
    h.alter_isr("foo", 0, [1, 2, 3, 4, 5, 6])
    p = h.partition("foo", 0)
    # replicas = target, the removed ones out of the ISR, the leader moved off 1
    assert state(h) == ((4, 5, 6), (), (), (4, 5, 6), 4)
    assert p.leader_epoch == epoch + 1
    assert h.c.list_partition_reassignments() == []


def test_a_completing_leader_that_stays_still_bumps_the_epoch() -> None:
    """Replicas are removed: their fetches must be fenced by a new leader epoch."""
    h = cluster()
    reassign(h, ("foo", 0, [1, 4]))
    epoch = h.partition("foo", 0).leader_epoch
    h.alter_isr("foo", 0, [1, 2, 3, 4])
    assert state(h) == ((1, 4), (), (), (1, 4), 1)
    assert h.partition("foo", 0).leader_epoch == epoch + 1


def test_a_reorder_completes_at_once_and_keeps_the_leader() -> None:
    h = cluster()
    reply = reassign(h, ("foo", 0, [3, 2, 1]))
    assert state(h) == ((3, 2, 1), (), (), (1, 2, 3), 1)
    assert reply["partitions"][0]["adding_replicas"] == []
    assert h.c.imbalanced_partition_count() == 1  # 3 is now the preferred leader


def test_dropping_a_replica_in_sync_completes_at_once() -> None:
    """A removal-only target whose remaining replicas are all in the ISR."""
    h = cluster()
    reassign(h, ("foo", 0, [2, 3]))
    assert state(h) == ((2, 3), (), (), (2, 3), 2)


def test_a_cancel_goes_back_to_the_original_replicas() -> None:
    """Kafka's testCancelReassignPartitions: the replicas being added leave the
    replica list and the ISR; the leader stays, with a new epoch."""
    h = cluster()
    reassign(h, ("foo", 1, [0 + 4, 2, 1]))  # [3,2,1] -> [4,2,1]: adds 4, removes 3
    assert state(h, pid=1) == ((4, 2, 1, 3), (4,), (3,), (3, 2, 1), 3)
    h.alter_isr("foo", 1, [3, 2])
    start = h.next_offset
    reply = reassign(h, ("foo", 1, None))
    assert state(h, pid=1) == ((2, 1, 3), (), (), (3, 2), 3)
    topic_id = h.c.image.topic_ids_by_name["foo"]
    assert h.records_since(start) == [
        PartitionChangeRecord(
            topic_id, 1, leader=3, replicas=(2, 1, 3), removing_replicas=(), adding_replicas=()
        )
    ]
    assert reply["partitions"][0]["replicas"] == [2, 1, 3]


def test_a_cancel_that_needs_an_unclean_election_is_refused_without_it() -> None:
    h = cluster()
    reassign(h, ("foo", 0, [4, 5, 6]))
    h.alter_isr("foo", 0, [1, 4])
    h.fence(1)
    h.alter_isr("foo", 0, [4])  # only the adding replica 4 is in sync
    start = h.next_offset
    with pytest.raises(ApiError) as e:
        h.c.alter_partition_reassignments(plan(("foo", 0, None)), 0)
    assert e.value.code == "INVALID_REPLICA_ASSIGNMENT" and "unclean" in e.value.message
    assert h.next_offset == start
    h.apply(
        h.c.alter_configs(AlterConfigsRequest("foo", {"unclean.leader.election.enable": "true"}), 0)
    )
    reassign(h, ("foo", 0, None))
    p = h.partition("foo", 0)
    assert p.replicas == (1, 2, 3) and not p.reassigning and p.leader in (2, 3)


def test_a_new_target_over_an_ongoing_reassignment_replaces_it() -> None:
    """Kafka's testReassignPartitionsHandlesNewReassignmentThatRemovesPreviously
    AddingReplicas: a replica the first plan was adding is removed by the second."""
    h = cluster()
    reassign(h, ("foo", 0, [1, 2, 4]))
    assert state(h) == ((1, 2, 4, 3), (4,), (3,), (1, 2, 3), 1)
    reassign(h, ("foo", 0, [1, 2, 5]))
    assert state(h) == ((1, 2, 5, 3, 4), (5,), (3, 4), (1, 2, 3), 1)
    h.alter_isr("foo", 0, [1, 2, 3, 5])
    assert state(h) == ((1, 2, 5), (), (), (1, 2, 5), 1)


def test_a_fence_during_a_reassignment_keeps_it_going() -> None:
    h = cluster()
    reassign(h, ("foo", 0, [4, 5, 6]))
    h.fence(1)
    assert state(h) == ((4, 5, 6, 1, 2, 3), (4, 5, 6), (1, 2, 3), (2, 3), 2)
    h.alter_isr("foo", 0, [2, 3, 4, 5, 6])
    assert state(h) == ((4, 5, 6), (), (), (4, 5, 6), 4)


def test_several_partitions_in_one_plan() -> None:
    h = cluster()
    reply = reassign(h, ("foo", 0, [4, 5, 6]), ("bar", 0, [2, 3, 1]), ("foo", 1, [3, 2, 1]))
    assert [(r["topic"], r["partition"]) for r in reply["partitions"]] == [
        ("foo", 0),
        ("bar", 0),
        ("foo", 1),
    ]
    assert [(r["topic"], r["partition"]) for r in h.c.list_partition_reassignments()] == [
        ("foo", 0)
    ]


@pytest.mark.parametrize(
    ("entry", "code", "words"),
    [
        (("nope", 0, [1, 2, 3]), "UNKNOWN_TOPIC_OR_PARTITION", "topic 'nope'"),
        (("foo", 7, [1, 2, 3]), "UNKNOWN_TOPIC_OR_PARTITION", "foo-7"),
        (("foo", 0, [1, 1, 2]), "INVALID_REPLICA_ASSIGNMENT", "twice"),
        (("foo", 0, [1, 2, 9]), "INVALID_REPLICA_ASSIGNMENT", "broker 9"),
        (("foo", 0, []), "INVALID_REPLICA_ASSIGNMENT", "empty"),
        (("foo", 0, None), "NO_REASSIGNMENT_IN_PROGRESS", "foo-0"),
    ],
)
def test_a_bad_entry_refuses_the_whole_plan_and_writes_nothing(
    entry: tuple, code: str, words: str
) -> None:
    h = cluster()
    start = h.next_offset
    before = h.c.image.to_dict()
    with pytest.raises(ApiError) as e:
        # a valid entry first: it must not be written either
        h.c.alter_partition_reassignments(plan(("bar", 0, [4, 5, 6]), entry), 0)
    assert e.value.code == code and words in e.value.message
    assert h.next_offset == start and h.c.image.to_dict() == before


def test_too_few_replicas_for_min_isr_is_refused() -> None:
    h = cluster()
    h.create_topic("safe", [[1, 2, 3]], **{"min.insync.replicas": "2"})
    with pytest.raises(ApiError) as e:
        h.c.alter_partition_reassignments(plan(("safe", 0, [4])), 0)
    assert e.value.code == "INVALID_REPLICA_ASSIGNMENT"
    assert "fewer than the topic's min.insync.replicas 2" in e.value.message


def test_an_inactive_controller_refuses() -> None:
    h = cluster()
    h.c.deactivate(h.next_offset - 1)
    with pytest.raises(ApiError) as e:
        h.c.alter_partition_reassignments(plan(("foo", 0, [4, 5, 6])), 0)
    assert e.value.code == "NOT_CONTROLLER"


# ------------------------------------------------------------------ the plan's JSON


def test_the_plan_is_kafka_reassign_partitions_json() -> None:
    req = parse_reassignment_plan(
        {
            "version": 1,
            "partitions": [
                {"topic": "foo", "partition": 0, "replicas": [4, 5, 6], "log_dirs": ["any"] * 3},
                {"topic": "foo", "partition": 1, "replicas": None},
            ],
        }
    )
    assert req == plan(("foo", 0, [4, 5, 6]), ("foo", 1, None))


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ([], "request body must be an object"),
        ({"version": 1}, "missing field 'partitions'"),
        ({"version": 2, "partitions": []}, "field 'version' must be 1"),
        ({"version": 1, "partitions": []}, "at least one partition"),
        ({"partitions": ["x"]}, "partitions[0] must be an object"),
        ({"partitions": [{"partition": 0, "replicas": [1]}]}, "partitions[0].topic"),
        ({"partitions": [{"topic": "t", "partition": -1, "replicas": [1]}]}, ".partition"),
        ({"partitions": [{"topic": "t", "partition": 0}]}, "missing field 'replicas'"),
        ({"partitions": [{"topic": "t", "partition": 0, "replicas": "1"}]}, ".replicas"),
        ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "x": 1}]}, "'x'"),
        (
            {"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}] * 2},
            "appears twice",
        ),
    ],
)
def test_a_malformed_plan_names_the_problem(body: Any, words: str) -> None:
    with pytest.raises(ApiError) as e:
        parse_reassignment_plan(body)
    assert e.value.code == "INVALID_REQUEST" and words in e.value.message


# ------------------------------------------------------------------ the pure rules


def test_reassignment_replicas_are_the_target_then_the_removed() -> None:
    r = ReassignmentReplicas.of((1, 2, 3), (3, 4, 5))
    assert (r.replicas, r.adding, r.removing) == ((3, 4, 5, 1, 2), (4, 5), (1, 2))


def test_a_revert_with_no_original_replica_in_sync_is_unclean() -> None:
    p = PartitionRegistration((4, 5, 1, 2), (4,), (1, 2), (4, 5), 4, 0, 3, 5)
    revert = ReassignmentRevert.of(p)
    assert (revert.replicas, revert.isr, revert.unclean) == ((1, 2), (1,), True)
    p = PartitionRegistration((4, 5, 1, 2), (4, 2), (1, 2), (4, 5), 4, 0, 3, 5)
    assert ReassignmentRevert.of(p) == ReassignmentRevert((1, 2), (2,), False)
