"""QuorumController: generate -> replay -> assert, Kafka's scenarios."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from kraft.controller.batching import to_batches
from kraft.controller.errors import ApiError
from kraft.controller.heartbeat import BrokerControlState, BrokerHeartbeatManager
from kraft.controller.quorum_controller import QuorumController
from kraft.controller.requests import (
    AlterConfigsRequest,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
    ElectLeadersRequest,
    IsrMember,
    RegisterBrokerRequest,
)
from metadata_log.image import MetadataImage
from metadata_log.records import (
    RECOVERED,
    RECOVERING,
    AbortTransactionRecord,
    BeginTransactionRecord,
    BrokerRegistrationChangeRecord,
    Endpoint,
    EndTransactionRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
)

from .harness import CLUSTER, Harness

S = BrokerControlState


# ---------------------------------------------------------------- heartbeat manager


def test_stale_brokers_found_one_at_a_time_in_contact_order() -> None:
    hb = BrokerHeartbeatManager(session_timeout_ms=10)
    for broker, t in ((0, 0), (1, 5), (2, 6)):
        hb.register(broker, fenced=True, now_ms=t)
        hb.touch(broker, fenced=False, metadata_offset=0, now_ms=t)
    assert hb.next_check_time_ms() == 10
    assert hb.find_one_stale_broker(9) is None
    assert hb.find_one_stale_broker(14) == 0  # only the first is stale
    hb.fence(0)
    assert hb.find_one_stale_broker(14) is None
    assert hb.find_one_stale_broker(15) == 1
    hb.fence(1)
    assert hb.find_one_stale_broker(15) is None
    assert hb.find_one_stale_broker(16) == 2


def test_next_state_table() -> None:
    hb = BrokerHeartbeatManager(9000)
    hb.register(1, fenced=True, now_ms=0)
    # fenced at offset 50 with registration offset 100 stays fenced; at 100 unfenced
    assert hb.next_state(1, S.FENCED, False, False, 50, 100, False) is S.FENCED
    assert hb.next_state(1, S.FENCED, False, False, 100, 100, False) is S.UNFENCED
    assert hb.next_state(1, S.FENCED, True, False, 100, 100, False) is S.FENCED
    assert hb.next_state(1, S.FENCED, False, True, 0, 100, False) is S.SHUTDOWN_NOW
    assert hb.next_state(1, S.UNFENCED, True, False, 0, 0, False) is S.FENCED
    assert hb.next_state(1, S.UNFENCED, False, True, 0, 0, True) is S.CONTROLLED_SHUTDOWN
    assert hb.next_state(1, S.UNFENCED, False, True, 0, 0, False) is S.SHUTDOWN_NOW
    assert hb.next_state(1, S.UNFENCED, True, True, 0, 0, False) is S.SHUTDOWN_NOW


def test_controlled_shutdown_waits_for_lowest_active_offset() -> None:
    hb = BrokerHeartbeatManager(9000)
    for b in (1, 2, 3):
        hb.register(b, fenced=True, now_ms=0)
        hb.touch(b, fenced=False, metadata_offset=10, now_ms=0)
    hb.mark_controlled_shutdown(1, offset=20)
    assert (
        hb.next_state(1, S.CONTROLLED_SHUTDOWN, False, True, 25, 0, True) is S.CONTROLLED_SHUTDOWN
    )
    assert (
        hb.next_state(1, S.CONTROLLED_SHUTDOWN, False, True, 25, 0, False) is S.CONTROLLED_SHUTDOWN
    )
    hb.touch(2, fenced=False, metadata_offset=20, now_ms=1)
    assert (
        hb.next_state(1, S.CONTROLLED_SHUTDOWN, False, True, 25, 0, False) is S.CONTROLLED_SHUTDOWN
    )
    hb.touch(3, fenced=False, metadata_offset=21, now_ms=1)
    assert hb.next_state(1, S.CONTROLLED_SHUTDOWN, False, True, 25, 0, False) is S.SHUTDOWN_NOW


# ---------------------------------------------------------------- registration


def test_registration_epoch_is_record_offset_and_starts_fenced() -> None:
    h = Harness()
    offset = h.next_offset
    epoch = h.register(1)
    assert epoch == offset
    rec = h.log[offset][1]
    assert isinstance(rec, RegisterBrokerRecord) and rec.fenced and rec.broker_epoch == offset
    assert h.c.image.brokers[1].fenced


def test_unfence_only_once_caught_up_to_registration() -> None:
    h = Harness()
    epoch = h.register(1)
    reply = h.heartbeat(1, now=10, offset=epoch - 1)
    assert reply == {
        "is_caught_up": False,
        "is_fenced": True,
        "in_controlled_shutdown": False,
        "should_shut_down": False,
    }
    start = h.next_offset
    reply = h.heartbeat(1, now=20, offset=epoch)
    assert reply["is_caught_up"] and not reply["is_fenced"]
    assert h.records_since(start) == [UnfenceBrokerRecord(1, epoch)]
    # a heartbeat that changes nothing writes nothing
    start = h.next_offset
    h.heartbeat(1, now=30)
    assert h.records_since(start) == []


def test_registration_errors() -> None:
    h = Harness()
    h.unfenced_broker(1)
    ep = (Endpoint("PLAINTEXT", "h", 1),)
    with pytest.raises(ApiError) as e:
        h.c.register_broker(
            RegisterBrokerRequest(1, CLUSTER, "another", ep, None, ()), 100, h.next_offset
        )
    assert e.value.code == "DUPLICATE_BROKER_REGISTRATION" and e.value.status == 409
    with pytest.raises(ApiError) as e:
        h.c.register_broker(
            RegisterBrokerRequest(2, "other-cluster", "x", ep, None, ()), 100, h.next_offset
        )
    assert e.value.code == "INCONSISTENT_CLUSTER_ID"
    with pytest.raises(ApiError) as e:
        h.c.register_broker(
            RegisterBrokerRequest(3001, CLUSTER, "x", ep, None, ()), 100, h.next_offset
        )
    assert e.value.code == "INVALID_REQUEST" and "controller" in e.value.message
    # once the old session expired, a new incarnation may register: new epoch, fenced
    old = h.c.image.brokers[1].broker_epoch
    new_epoch = h.register(1, now=20_000, incarnation="another")
    assert new_epoch > old and h.c.image.brokers[1].fenced


def test_stale_epoch_and_unknown_broker() -> None:
    h = Harness()
    epoch = h.unfenced_broker(1)
    for req in (
        BrokerHeartbeatRequest(1, epoch - 1, 0, False, False),
        BrokerHeartbeatRequest(7, 0, 0, False, False),
    ):
        with pytest.raises(ApiError) as e:
            h.c.heartbeat(req, 5)
        assert e.value.code == "STALE_BROKER_EPOCH" and e.value.status == 409


def test_standby_is_not_controller() -> None:
    h = Harness()
    h.c.deactivate(h.next_offset - 1)
    with pytest.raises(ApiError) as e:
        h.c.heartbeat(BrokerHeartbeatRequest(1, 0, 0, False, False), 0)
    assert e.value.code == "NOT_CONTROLLER" and e.value.status == 503


# ---------------------------------------------------------------- fencing


def three_broker_topic(h: Harness, name: str = "t", assignments=None) -> str:
    for b in (1, 2, 3):
        h.unfenced_broker(b)
    return h.create_topic(name, assignments or [[1, 2, 3], [2, 3, 1], [3, 1, 2]])


def test_fencing_one_at_a_time_in_last_contact_order() -> None:
    h = Harness(session_timeout_ms=1000)
    for b in (1, 2, 3, 4):
        h.unfenced_broker(b)
    h.create_topic("t", [[1, 2, 3, 4], [2, 3, 4, 1], [3, 4, 1, 2]])
    # broker 4 keeps heartbeating; 1, 2, 3 last spoke at 100, 300, 200
    for b, t in ((1, 100), (2, 300), (3, 200)):
        h.heartbeat(b, t)
    order = []
    now = 0
    while now <= 3000:
        h.heartbeat(4, now)
        while (res := h.apply(h.c.maybe_fence_stale_broker(now))) is not None:
            order.append((now, res.reply["fenced_broker"]))
            fence = res.records[-1]
            assert isinstance(fence, FenceBrokerRecord)
            assert all(isinstance(r, PartitionChangeRecord) for r in res.records[:-1])
        now += 50
    assert [b for _, b in order] == [1, 3, 2]
    assert [t for t, _ in order] == [1100, 1200, 1300]
    for pid in range(3):
        p = h.partition("t", pid)
        assert p.leader == 4 and p.isr == (4,)


def test_each_fence_sees_the_previous_one() -> None:
    """Two silent brokers of one partition: the second fence keeps the last ISR member."""
    h = Harness(session_timeout_ms=1000, elr=False)  # Kafka 3.x semantics
    for b in (1, 2):
        h.unfenced_broker(b)
    h.create_topic("t", [[1, 2]])
    h.heartbeat(1, 0)
    h.heartbeat(2, 10)
    first = h.apply(h.c.maybe_fence_stale_broker(2000))
    second = h.apply(h.c.maybe_fence_stale_broker(2000))
    assert first.reply["fenced_broker"] == 1 and second.reply["fenced_broker"] == 2
    assert first.records[0] == PartitionChangeRecord(
        h.c.image.topic_ids_by_name["t"], 0, isr=(2,), leader=2
    )
    p = h.partition("t", 0)
    assert p.leader == -1 and p.isr == (2,)  # Kafka 3.x: the last ISR member stays


def test_queued_heartbeat_counts_as_contact() -> None:
    h = Harness(session_timeout_ms=1000)
    h.unfenced_broker(1)
    h.c.note_heartbeat_contact(1, h.c.image.brokers[1].broker_epoch, 900)
    assert h.c.maybe_fence_stale_broker(1500) is None
    assert h.c.maybe_fence_stale_broker(1900).reply["fenced_broker"] == 1


def test_new_controller_treats_brokers_as_just_seen() -> None:
    h = Harness(session_timeout_ms=1000)
    h.unfenced_broker(1)
    committed = h.next_offset - 1
    h.c.deactivate(committed)
    h.c.activate(now_ms=50_000)  # failover long after the broker's last heartbeat
    assert h.c.maybe_fence_stale_broker(50_500) is None
    assert h.c.maybe_fence_stale_broker(51_000).reply["fenced_broker"] == 1


def test_unfence_elects_leaderless_partitions() -> None:
    h = Harness(session_timeout_ms=1000)
    h.unfenced_broker(1)
    h.create_topic("t", [[1]])
    h.apply(h.c.maybe_fence_stale_broker(5000))
    assert h.partition("t", 0).leader == -1
    start = h.next_offset
    h.heartbeat(1, 5001)
    recs = h.records_since(start)
    assert isinstance(recs[0], UnfenceBrokerRecord)
    assert h.partition("t", 0).leader == 1 and h.partition("t", 0).leader_epoch == 2


# ---------------------------------------------------------------- controlled shutdown


def test_controlled_shutdown_moves_leadership_then_completes() -> None:
    h = Harness()
    for b in (0, 1, 2):
        h.unfenced_broker(b)
    tid = h.create_topic("t", [[0, 1, 2]])
    start = h.next_offset
    reply = h.heartbeat(0, 10, want_shutdown=True)
    assert reply["in_controlled_shutdown"] and not reply["should_shut_down"]
    assert h.records_since(start) == [
        BrokerRegistrationChangeRecord(
            0, h.c.image.brokers[0].broker_epoch, in_controlled_shutdown=1
        ),
        PartitionChangeRecord(tid, 0, isr=(1, 2), leader=1),
    ]
    # Waits until the lowest active broker's offset reached the end of the
    # shutdown's write (Kafka's processBatchEndOffset): its last leadership move.
    h.heartbeat(1, 20, offset=start + 1)
    h.heartbeat(2, 20, offset=start)
    assert not h.heartbeat(0, 30, want_shutdown=True)["should_shut_down"]
    h.heartbeat(1, 40)
    h.heartbeat(2, 40)
    reply = h.heartbeat(0, 50, want_shutdown=True)
    assert reply["should_shut_down"] and reply["is_fenced"]
    assert h.c.image.brokers[0].fenced


def _led_by_broker_0(partitions: int) -> Harness:
    """Brokers 0-2 unfenced, `partitions` partitions of replicas [0, 1, 2]."""
    h = Harness()
    for b in (0, 1, 2):
        h.unfenced_broker(b)
    h.create_topic("t", [[0, 1, 2]] * partitions)
    return h


def _shutdown_records(h: Harness, broker: int, now: int) -> list[Any]:
    """The records of `broker`'s controlled shutdown request, not yet replayed."""
    epoch = h.c.image.brokers[broker].broker_epoch
    req = BrokerHeartbeatRequest(broker, epoch, h.next_offset, False, True)
    res = h.c.heartbeat(req, now).drained()
    assert res.reply["in_controlled_shutdown"]
    return list(res.records)


def _shutdown_as_transaction(h: Harness, broker: int, now: int) -> tuple[int, int, int]:
    """`broker` asks for a controlled shutdown; its write (many leaderships) is
    appended as a metadata transaction over several batches and replayed batch by
    batch, as the shell does. Returns the offsets of the BeginTransactionRecord,
    the BrokerRegistrationChangeRecord and the EndTransactionRecord."""
    plan = to_batches(_shutdown_records(h, broker, now), 400)
    assert len(plan.batches) > 2 and type(plan.records[0]) is BeginTransactionRecord
    base = off = h.next_offset
    for b in plan.batches:
        recs = plan.records[off - base : off - base + b.record_count]
        h.c.replay_batch(off, recs)
        h.log.extend((off + i, r) for i, r in enumerate(recs))
        off += b.record_count
    assert type(plan.records[1]) is BrokerRegistrationChangeRecord
    assert type(plan.records[-1]) is EndTransactionRecord
    return base, base + 1, off - 1


def test_controlled_shutdown_waits_for_the_end_of_its_transaction() -> None:
    """Kafka's processBatchEndOffset: a broker that reports an offset inside the
    shutdown's transaction has not applied its leadership moves (they apply at the
    end record), so the shutdown waits for the end, not the first record."""
    h = _led_by_broker_0(60)
    _, change, end = _shutdown_as_transaction(h, 0, 10)
    assert not h.c.index.leads_any(0)
    # Both others are past the change record, inside the transaction: not yet.
    h.heartbeat(1, 20, offset=end - 1)
    h.heartbeat(2, 20, offset=change + 3)
    assert not h.heartbeat(0, 30, want_shutdown=True)["should_shut_down"]
    h.heartbeat(2, 40, offset=end)
    assert not h.heartbeat(0, 50, want_shutdown=True)["should_shut_down"]
    h.heartbeat(1, 60, offset=end)
    reply = h.heartbeat(0, 70, want_shutdown=True)
    assert reply["should_shut_down"] and h.c.image.brokers[0].fenced


def test_a_shutdown_batch_replayed_in_slices_waits_for_the_batch_end() -> None:
    """The shell replays a large batch in slices (replay_in_steps): the write ends
    with the batch, not with the slice that held the shutdown record."""
    h = _led_by_broker_0(10)
    records = _shutdown_records(h, 0, 10)
    base = h.next_offset
    steps = list(h.c.replay_in_steps(base, records, 0, 2))
    assert len(steps) > 3
    assert h.c.heartbeats.state(0).controlled_shutdown_offset == base + len(records) - 1


def test_an_aborted_shutdown_transaction_leaves_no_shutdown_behind() -> None:
    """A leader that failed mid-way leaves the shutdown's transaction open; the
    next one aborts it. The broker is then not shutting down, and its next request
    starts a new shutdown whose offset is the new write's end."""
    h = _led_by_broker_0(60)
    records = _shutdown_records(h, 0, 10)
    base = h.next_offset
    # the first half of the transaction, then the abort
    half = [BeginTransactionRecord("shutdown"), *records[: len(records) // 2]]
    h.c.replay_batch(base, half)
    h.log.extend((base + i, r) for i, r in enumerate(half))
    assert h.c.heartbeats.state(0).shutting_down
    h.c.replay_batch(h.next_offset, [AbortTransactionRecord()])
    h.log.append((h.next_offset, AbortTransactionRecord()))
    assert not h.c.heartbeats.state(0).shutting_down
    assert not h.c.image.brokers[0].in_controlled_shutdown
    # A standby that saw the open transaction and becomes active: the image decides.
    standby = QuorumController(h.config, random.Random(2))
    standby.replay_batch(0, [r for _, r in h.log[:-1]])
    standby.activate(100)
    assert not standby.heartbeats.state(0).shutting_down
    # The broker asks again: a new shutdown, waiting for its own write's end.
    _, _, end = _shutdown_as_transaction(h, 0, 20)
    assert h.c.heartbeats.state(0).controlled_shutdown_offset == end


# ---------------------------------------------------------------- topics


def test_create_topic_placement_and_errors() -> None:
    h = Harness()
    for b, rack in ((1, "a"), (2, "a"), (3, "b"), (4, "b")):
        h.register(b, rack=rack)
        h.heartbeat(b, 0)
    res = h.apply(h.c.create_topic(CreateTopicRequest("orders", 8, 2, None, {}), 0))
    topic = h.c.image.topic_by_name("orders")
    assert res.reply["partitions"] == 8 and len(topic.partitions) == 8
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    for p in topic.partitions.values():
        assert {racks[r] for r in p.replicas} == {"a", "b"}  # rack-aware
        assert p.leader == p.replicas[0] and p.isr == p.replicas
    leaders = [p.leader for p in topic.partitions.values()]
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3, 4, 4]  # round-robin
    cases = [
        (CreateTopicRequest("orders", 1, 1, None, {}), "TOPIC_ALREADY_EXISTS"),
        (CreateTopicRequest("x", 1, 5, None, {}), "INVALID_REPLICATION_FACTOR"),
        (CreateTopicRequest("x", 0, 1, None, {}), "INVALID_PARTITIONS"),
        (CreateTopicRequest("bad name!", 1, 1, None, {}), "INVALID_TOPIC_EXCEPTION"),
        (CreateTopicRequest("x", 1, 1, None, {"retention.ms": "soon"}), "INVALID_CONFIG"),
        (CreateTopicRequest("x", 1, 1, None, {"no.such": "1"}), "INVALID_CONFIG"),
        (CreateTopicRequest("x", None, None, ((1, 1),), {}), "INVALID_REPLICA_ASSIGNMENT"),
        (CreateTopicRequest("x", None, None, ((9,),), {}), "INVALID_REPLICA_ASSIGNMENT"),
    ]
    for req, code in cases:
        with pytest.raises(ApiError) as e:
            h.c.create_topic(req, 0)
        assert e.value.code == code, req


def test_delete_add_partitions_and_configs() -> None:
    h = Harness()
    three_broker_topic(h)
    h.apply(h.c.create_partitions(CreatePartitionsRequest("t", 5, None), 0))
    assert len(h.c.image.topic_by_name("t").partitions) == 5
    with pytest.raises(ApiError) as e:
        h.c.create_partitions(CreatePartitionsRequest("t", 5, None), 0)
    assert e.value.code == "INVALID_PARTITIONS"
    h.apply(h.c.alter_configs(AlterConfigsRequest("t", {"retention.ms": "1000"}), 0))
    assert h.c.image.topic_configs("t") == {"retention.ms": "1000"}
    h.apply(h.c.alter_configs(AlterConfigsRequest("t", {"retention.ms": None}), 0))
    assert h.c.image.topic_configs("t") == {}
    h.apply(h.c.delete_topic("t", 0))
    assert h.c.image.topic_by_name("t") is None
    with pytest.raises(ApiError) as e:
        h.c.delete_topic("t", 0)
    assert e.value.code == "UNKNOWN_TOPIC_OR_PARTITION" and e.value.status == 404


# ---------------------------------------------------------------- AlterPartition


def alter(h: Harness, name: str, pid: int, isr: list[int], **over) -> AlterPartitionRequest:
    p = h.partition(name, pid)
    fields = dict(
        broker_id=p.leader,
        broker_epoch=h.c.image.brokers[p.leader].broker_epoch,
        topic_id=h.c.image.topic_ids_by_name[name],
        partition_id=pid,
        leader_epoch=p.leader_epoch,
        partition_epoch=p.partition_epoch,
        new_isr_with_epochs=tuple(IsrMember(b, h.c.image.brokers[b].broker_epoch) for b in isr),
        leader_recovery_state=p.leader_recovery_state,
    )
    fields.update(over)
    return AlterPartitionRequest(**fields)


def test_alter_partition_shrink_and_expand() -> None:
    h = Harness()
    three_broker_topic(h)
    before = h.partition("t", 0)
    res = h.apply(h.c.alter_partition(alter(h, "t", 0, [1, 2]), 0))
    assert res.reply["isr"] == [1, 2] and res.reply["partition_epoch"] == before.partition_epoch + 1
    res = h.apply(h.c.alter_partition(alter(h, "t", 0, [1, 2, 3]), 0))
    after = h.partition("t", 0)
    assert after.isr == (1, 2, 3) and after.leader_epoch == before.leader_epoch


@pytest.mark.parametrize(
    "over, code",
    [
        ({"broker_epoch": 999}, "STALE_BROKER_EPOCH"),
        ({"leader_epoch": -1}, "FENCED_LEADER_EPOCH"),
        ({"partition_epoch": -1}, "INVALID_UPDATE_VERSION"),
        # newer than the controller's: it is behind (Kafka's validateAlterPartitionData)
        ({"partition_epoch": 99}, "NOT_CONTROLLER"),
        ({"topic_id": "nope"}, "UNKNOWN_TOPIC_OR_PARTITION"),
        ({"broker_id": 2}, "STALE_BROKER_EPOCH"),
        ({"leader_recovery_state": RECOVERING}, "INVALID_REQUEST"),
    ],
)
def test_alter_partition_validation(over: dict, code: str) -> None:
    h = Harness()
    three_broker_topic(h)
    with pytest.raises(ApiError) as e:
        h.c.alter_partition(alter(h, "t", 0, [1, 2, 3], **over), 0)
    assert e.value.code == code


def test_alter_partition_ineligible_replica() -> None:
    h = Harness(session_timeout_ms=1000)
    three_broker_topic(h)
    h.apply(h.c.alter_partition(alter(h, "t", 0, [1, 2]), 0))
    h.heartbeat(1, 1500)
    h.heartbeat(2, 1500)
    h.apply(h.c.maybe_fence_stale_broker(1500))  # broker 3 fenced
    with pytest.raises(ApiError) as e:
        h.c.alter_partition(alter(h, "t", 0, [1, 2, 3]), 1500)
    assert e.value.code == "INELIGIBLE_REPLICA"
    h.heartbeat(3, 1600)  # back and unfenced, but the leader names an old epoch
    req = alter(h, "t", 0, [1, 2, 3])
    stale = req.new_isr_with_epochs[:2] + (
        IsrMember(3, req.new_isr_with_epochs[2].broker_epoch - 1),
    )
    with pytest.raises(ApiError) as e:
        h.c.alter_partition(replace(req, new_isr_with_epochs=stale), 1600)
    assert e.value.code == "INELIGIBLE_REPLICA"


# ---------------------------------------------------------------- elections


def test_preferred_and_unclean_elections() -> None:
    h = Harness(session_timeout_ms=1000)
    three_broker_topic(h, assignments=[[2, 1, 3]])
    h.heartbeat(1, 500)
    h.heartbeat(3, 500)
    h.apply(h.c.maybe_fence_stale_broker(1200))  # broker 2 (leader, preferred) fenced
    assert h.partition("t", 0).leader == 1
    with pytest.raises(ApiError) as e:
        h.c.elect_leaders(ElectLeadersRequest("t", 0, "preferred"), 1200)
    assert e.value.code == "PREFERRED_LEADER_NOT_AVAILABLE"
    h.heartbeat(2, 1300)  # back, unfenced; leader stays 1 (still in ISR? no: 2 left the ISR)
    h.apply(h.c.alter_partition(alter(h, "t", 0, [1, 3, 2]), 1300))
    res = h.apply(h.c.elect_leaders(ElectLeadersRequest("t", 0, "preferred"), 1300))
    assert res.reply["leader"] == 2 and res.reply["changed"]
    res = h.apply(h.c.elect_leaders(ElectLeadersRequest("t", 0, "preferred"), 1300))
    assert not res.reply["changed"]


def test_unclean_election_enabled_by_topic_config() -> None:
    h = Harness(session_timeout_ms=1000, elr=False)  # Kafka 3.x semantics
    for b in (1, 2):
        h.unfenced_broker(b)
    h.create_topic("t", [[1, 2]])
    h.apply(h.c.alter_partition(alter(h, "t", 0, [1]), 0))  # ISR [1]
    h.heartbeat(2, 900)
    h.apply(h.c.maybe_fence_stale_broker(1100))  # broker 1, the only ISR member
    p = h.partition("t", 0)
    assert p.leader == -1 and p.isr == (1,)
    res = h.apply(
        h.c.alter_configs(
            AlterConfigsRequest("t", {"unclean.leader.election.enable": "true"}), 1100
        )
    )
    p = h.partition("t", 0)
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), RECOVERING)
    assert any(isinstance(r, PartitionChangeRecord) for r in res.records)


# ---------------------------------------------------------------- replay everywhere


def test_standby_replaying_the_log_has_the_same_image() -> None:
    h = Harness(session_timeout_ms=1000)
    three_broker_topic(h)
    h.heartbeat(2, 500)
    h.heartbeat(3, 500)
    h.apply(h.c.maybe_fence_stale_broker(1100))
    standby = MetadataImage()
    for off, rec in h.log:
        standby.replay(rec, off)
    assert standby.to_dict() == h.c.image.to_dict()


def test_deactivate_reverts_uncommitted_records() -> None:
    h = Harness(session_timeout_ms=1000)
    three_broker_topic(h)
    committed = h.next_offset - 1
    h.c.on_commit(committed)
    reference = h.c.image.to_dict()
    h.heartbeat(2, 500)
    h.heartbeat(3, 500)
    h.apply(h.c.maybe_fence_stale_broker(1100))
    assert h.c.image.to_dict() != reference
    h.c.deactivate(committed)
    assert h.c.image.to_dict() == reference
    # the ISR index followed the revert
    assert h.c.index.led_by[1] and not h.c.index.leaderless


def test_reregistration_of_an_unfenced_broker_moves_its_leaderships_first() -> None:
    """A new incarnation whose predecessor's session expired before the fence ran
    (or the same incarnation retrying): the new registration is fenced, so the
    broker must not stay leader or in an ISR it shares (a fenced broker leads nothing)."""
    h = Harness(session_timeout_ms=1000, elr=False)  # Kafka 3.x semantics
    for b in (1, 2):
        h.unfenced_broker(b)
    tid = h.create_topic("t", [[1, 2]])
    uid = h.create_topic("u", [[1]])
    h.heartbeat(2, 1500)
    start = h.next_offset
    epoch = h.register(1, now=1500, incarnation="second")  # session of 1 expired at 1000
    recs = h.records_since(start)
    assert isinstance(recs[0], RegisterBrokerRecord) and recs[0].broker_epoch == start == epoch
    assert recs[1:] == [
        *sorted(
            [
                PartitionChangeRecord(tid, 0, isr=(2,), leader=2),
                PartitionChangeRecord(uid, 0, leader=-1),
            ],
            key=lambda r: r.topic_id,
        )
    ]
    assert h.c.image.brokers[1].fenced
    assert h.partition("t", 0).leader == 2 and h.partition("u", 0).leader == -1
    assert not h.c.index.leads_any(1)
    # and it comes back like any fenced broker: unfenced once caught up, leads again
    h.heartbeat(1, 1600)
    assert h.partition("u", 0).leader == 1


def test_unclean_election_on_request_then_recovery_ends_by_alter_partition() -> None:
    h = Harness(session_timeout_ms=1000, elr=False)  # Kafka 3.x semantics
    for b in (1, 2, 3):
        h.unfenced_broker(b)
    h.create_topic("t", [[1, 2, 3]])
    h.apply(h.c.alter_partition(alter(h, "t", 0, [1]), 0))  # ISR [1]
    h.heartbeat(2, 900)
    h.heartbeat(3, 900)
    h.apply(h.c.maybe_fence_stale_broker(1100))  # broker 1, the only ISR member
    assert (h.partition("t", 0).leader, h.partition("t", 0).isr) == (-1, (1,))
    with pytest.raises(ApiError) as e:  # a clean (preferred) election has nobody
        h.c.elect_leaders(ElectLeadersRequest("t", 0, "preferred"), 1100)
    assert e.value.code == "PREFERRED_LEADER_NOT_AVAILABLE"
    res = h.apply(h.c.elect_leaders(ElectLeadersRequest("t", 0, "unclean"), 1100))
    p = h.partition("t", 0)
    assert res.reply["changed"] and (p.leader, p.isr, p.leader_recovery_state) == (
        2,
        (2,),
        RECOVERING,
    )
    # While RECOVERING the ISR cannot grow; the leader ends recovery with AlterPartition.
    with pytest.raises(ApiError) as e:
        h.c.alter_partition(alter(h, "t", 0, [2, 3]), 1100)
    assert e.value.code == "INVALID_REQUEST"
    h.apply(h.c.alter_partition(alter(h, "t", 0, [2], leader_recovery_state=RECOVERED), 1100))
    p = h.partition("t", 0)
    assert (p.leader, p.leader_recovery_state) == (2, RECOVERED)
    h.apply(h.c.alter_partition(alter(h, "t", 0, [2, 3]), 1100))
    assert h.partition("t", 0).isr == (2, 3) and h.partition("t", 0).leader_epoch == p.leader_epoch
