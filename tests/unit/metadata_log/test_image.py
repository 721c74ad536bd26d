"""MetadataImage replay: the scripted story field by field, snapshots, transactions."""

from __future__ import annotations

import uuid

import pytest

from metadata_log.image import (
    BrokerRegistration,
    MetadataImage,
    MetadataReplayError,
    PartitionRegistration,
)
from metadata_log.records import (
    LATEST_METADATA_VERSION,
    TOPIC_RESOURCE,
    AbortTransactionRecord,
    BeginTransactionRecord,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    Endpoint,
    EndTransactionRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from metadata_log.replay import read_snapshot_image
from metadata_log.snapshot import SnapshotId, read_snapshot, write_snapshot
from tests.cluster_story import cluster_story, story_image


@pytest.fixture(scope="module")
def story_batches():
    return cluster_story()


def test_story_replays_to_expected_image(story_batches) -> None:
    image = story_image(story_batches)
    assert image.offset == 26
    assert image.last_append_time_ms == 1_700_000_021_250  # the story's clock at its end
    assert image.features == {"metadata.version": LATEST_METADATA_VERSION}
    assert image.configs == {}

    regs = {
        r.broker_id: r
        for b in story_batches
        for r in b.records
        if isinstance(r, RegisterBrokerRecord)
    }
    assert sorted(image.brokers) == sorted(regs) == [1, 2, 3]
    expected_state = {  # (epoch = offset of the registration, fenced, in controlled shutdown)
        1: (2, False, False),  # fenced, then unfenced
        2: (3, True, True),  # controlled shutdown, then fenced
        3: (4, False, False),
    }
    for bid, (epoch, fenced, shutdown) in expected_state.items():
        assert image.brokers[bid] == BrokerRegistration(
            broker_id=bid,
            broker_epoch=epoch,
            incarnation_id=regs[bid].incarnation_id,
            endpoints=(Endpoint("PLAINTEXT", "127.0.0.1", 9091 + bid, "PLAINTEXT"),),
            features=(BrokerFeature("metadata.version", 1, LATEST_METADATA_VERSION),),
            rack="rack-" + "abc"[bid - 1],
            fenced=fenced,
            in_controlled_shutdown=shutdown,
        ), bid
    # three distinct incarnations, UUID-shaped
    assert len({str(uuid.UUID(r.incarnation_id)) for r in regs.values()}) == 3

    (topic_rec,) = [r for b in story_batches for r in b.records if isinstance(r, TopicRecord)]
    assert image.topic_ids_by_name == {"orders": topic_rec.topic_id}
    topic = image.topic_by_name("orders")
    assert topic is not None
    assert (topic.name, topic.topic_id, sorted(topic.partitions)) == (
        "orders",
        topic_rec.topic_id,
        [0, 1, 2],
    )
    assert image.topic_configs("orders") == {}
    p0, p1, p2 = (topic.partitions[i] for i in range(3))
    # PartitionRegistration(replicas, isr, removing, adding, leader, leader_recovery_state,
    #                       leader_epoch, partition_epoch)
    # p0: leader 1 -> fence(1) -> 2 (epoch 1) -> shutdown(2) -> 1 (epoch 2)
    assert p0 == PartitionRegistration((1, 2, 3), (1, 3), (), (), 1, 0, 2, 3)
    # p1: leader 2 kept through fence(1); shutdown(2) -> 3 (epoch 1)
    assert p1 == PartitionRegistration((2, 3, 1), (3, 1), (), (), 3, 0, 1, 3)
    # p2: leader 3 throughout; only ISR changes, so leader_epoch stays 0
    assert p2 == PartitionRegistration((3, 1, 2), (3, 1), (), (), 3, 0, 0, 3)
    # nobody fenced or shutting down leads anything
    for p in topic.partitions.values():
        assert not image.brokers[p.leader].fenced
        assert p.leader in p.isr
    assert image.offline_partition_count() == 0 and not image.in_transaction


def test_image_snapshot_file_image_round_trip(story_batches, tmp_path) -> None:
    """image -> snapshot file (write_snapshot) -> read back -> image: equal, field by field."""
    image = story_image(story_batches)
    image.replay(ConfigRecord(TOPIC_RESOURCE, "orders", "retention.ms", "1000"), image.offset + 1)
    sid = SnapshotId(image.offset + 1, story_batches[-1].leader_epoch)
    path = write_snapshot(
        tmp_path,
        sid,
        image.to_records(),
        last_contained_log_time=image.last_append_time_ms,
        append_time_ms=image.last_append_time_ms,
        records_per_batch=4,  # several batches
    )
    snap = read_snapshot(path)
    copy = MetadataImage.from_records(
        snap.records(), snap.snapshot_id.end_offset, snap.header.last_contained_log_time
    )
    assert copy == image
    assert copy.to_dict() == image.to_dict()
    assert copy.last_append_time_ms == image.last_append_time_ms
    # and the log-directory reader that the broker agent and Spark cross-check use
    assert read_snapshot_image(path, sid.end_offset) == image


def test_fence_step_moves_leadership(story_batches) -> None:
    image = MetadataImage()
    for b in story_batches:
        image.replay_batch(b.base_offset, b.records)
        if any(isinstance(r, FenceBrokerRecord) for r in b.records):
            break
    topic = image.topic_by_name("orders")
    assert image.brokers[1].fenced
    assert [topic.partitions[i].leader for i in range(3)] == [2, 2, 3]
    assert all(1 not in p.isr for p in topic.partitions.values())
    assert topic.partitions[0].leader_epoch == 1


def test_image_snapshot_image_round_trip(story_batches) -> None:
    image = story_image(story_batches)
    image.replay(ConfigRecord(TOPIC_RESOURCE, "orders", "retention.ms", "1000"), image.offset + 1)
    copy = MetadataImage.from_records(
        list(image.to_records()), image.offset + 1, image.last_append_time_ms
    )
    assert copy == image
    assert copy.to_dict() == image.to_dict()


def _base() -> MetadataImage:
    image = MetadataImage()
    image.replay(RegisterBrokerRecord(1, "inc", 0, fenced=True), 0)
    image.replay(TopicRecord("t", "T"), 1)
    image.replay(PartitionRecord("T", 0, (1,), (1,), leader=1), 2)
    return image


def test_transaction_applies_only_at_end() -> None:
    image = _base()
    image.replay(BeginTransactionRecord("big"), 3)
    image.replay(TopicRecord("u", "U"), 4)
    assert image.topic_by_name("u") is None and image.in_transaction
    image.replay(EndTransactionRecord(), 5)
    assert image.topic_by_name("u") is not None and not image.in_transaction


def test_aborted_transaction_is_dropped() -> None:
    image = _base()
    image.replay(BeginTransactionRecord("big"), 3)
    image.replay(TopicRecord("u", "U"), 4)
    image.replay(AbortTransactionRecord("leader lost"), 5)
    assert image.topic_by_name("u") is None and image.offset == 5


def test_partition_change_epochs() -> None:
    image = _base()
    image.replay(PartitionChangeRecord("T", 0, leader=1), 3)  # same leader still bumps
    p = image.topics["T"].partitions[0]
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (1, 1, 1)
    image.replay(PartitionChangeRecord("T", 0, isr=(1,)), 4)
    p = image.topics["T"].partitions[0]
    assert (p.leader_epoch, p.partition_epoch) == (1, 2)


def test_broker_state_records() -> None:
    image = _base()
    image.replay(UnfenceBrokerRecord(1, 0), 3)
    assert not image.brokers[1].fenced
    image.replay(BrokerRegistrationChangeRecord(1, 0, fenced=0, in_controlled_shutdown=1), 4)
    assert image.brokers[1].in_controlled_shutdown and not image.brokers[1].fenced
    image.replay(BrokerRegistrationChangeRecord(1, 0, fenced=1), 5)
    assert image.brokers[1].fenced
    image.replay(UnregisterBrokerRecord(1, 0), 6)
    assert 1 not in image.brokers


def test_remove_topic_drops_configs() -> None:
    image = _base()
    image.replay(ConfigRecord(TOPIC_RESOURCE, "t", "a", "b"), 3)
    image.replay(RemoveTopicRecord("T"), 4)
    assert image.topics == {} and image.configs == {} and image.topic_by_name("t") is None


@pytest.mark.parametrize(
    "record, reason",
    [
        (FenceBrokerRecord(9, 0), "unregistered broker 9"),
        (FenceBrokerRecord(1, 5), "epoch 5, registered epoch is 0"),
        (PartitionChangeRecord("X", 0, leader=1), "unknown topic id X"),
        (PartitionChangeRecord("T", 4, leader=1), "unknown partition t-4"),
        (TopicRecord("t", "Z"), "topic 't' already exists"),
        (EndTransactionRecord(), "without a transaction"),
    ],
)
def test_contradicting_record_names_offset(record, reason: str) -> None:
    with pytest.raises(MetadataReplayError, match=rf"offset 3: .*{reason}"):
        _base().replay(record, 3)


def test_offsets_must_rise() -> None:
    with pytest.raises(MetadataReplayError, match="not after"):
        _base().replay(TopicRecord("u", "U"), 2)


class Recorder:
    def __init__(self) -> None:
        self.changes: list[tuple] = []

    def partition_changed(self, topic_id, partition_id, old, new) -> None:
        self.changes.append((topic_id, partition_id, old, new))


def test_revert_undoes_uncommitted_replays(story_batches) -> None:
    """An active controller replays before commit and reverts on leadership loss."""
    committed_at = 12
    reference = MetadataImage()
    image = MetadataImage()
    image.enable_journal()
    listener = Recorder()
    image.listener = listener
    for b in story_batches:
        image.replay_batch(b.base_offset, b.records, b.append_time_ms)
        for i, r in enumerate(b.records):
            if b.base_offset + i <= committed_at:
                reference.replay(r, b.base_offset + i)
    image.commit_to(committed_at)
    image.revert_to(committed_at)
    assert image.to_dict() == reference.to_dict()
    # the listener saw every partition return to its committed registration
    last = {}
    for tid, pid, _old, new in listener.changes:
        last[(tid, pid)] = new
    topic = reference.topic_by_name("orders")
    assert {k: v for k, v in last.items()} == {
        (topic.topic_id, p): r for p, r in topic.partitions.items()
    }


def test_revert_inside_and_across_transactions() -> None:
    image = _base()
    image.enable_journal()
    image.replay(BeginTransactionRecord("t"), 3)
    image.replay(TopicRecord("u", "U"), 4)
    image.replay(TopicRecord("v", "V"), 5)
    image.replay(EndTransactionRecord(), 6)
    image.replay(RemoveTopicRecord("U"), 7)
    image.replay(ConfigRecord(TOPIC_RESOURCE, "v", "a", "1"), 8)
    image.revert_to(5)
    assert image.in_transaction and image.topic_by_name("v") is None and image.offset == 5
    image.revert_to(4)
    image.replay(AbortTransactionRecord("lost"), 5)
    assert image.topic_by_name("u") is None and not image.in_transaction
    image.revert_to(2)
    assert image.to_dict() == _base().to_dict()
