"""A second real Kafka, of 2026 (apache/kafka:latest, metadata.version level 29):
the first 3,606 records of its segment and a `.checkpoint` snapshot of the same
cluster. Pinned: counts by type (equal to an independent count), the broker's four
registrations and its fence/unfence history, topics created and deleted, KIP-966
ELR in PartitionChangeRecord v2, the snapshot's contents, and our writer
re-encoding every byte. Origin: tests/fixtures/kafka/README.md."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from metadata_log.image import MetadataImage
from metadata_log.kafka.reader import detect_format, iter_file, iter_log, read_cluster_id
from metadata_log.kafka.record_serde import UnmodelledKafkaRecord
from metadata_log.records import PartitionChangeRecord, SnapshotFooter, SnapshotHeader
from tests.unit.metadata_log.kafka.independent import assert_reencodes_exactly, independent_counts

FIXTURES = Path(__file__).parents[3] / "fixtures" / "kafka"
LOG_DIR = FIXTURES / "kafka-4x-rig"
SEGMENT = LOG_DIR / "__cluster_metadata-0" / "00000000000000000000.log"
SNAPSHOT = (
    FIXTURES
    / "kafka-4x-rig-snapshot"
    / "__cluster_metadata-0"
    / "00000000000000046533-0000000004.checkpoint"
)
TOPIC = "YNY5hm01SZ-bAGeCLAGqWA"  # test-topic, third incarnation

COUNTS = {
    "LeaderChangeMessage": 4,
    "BeginTransactionRecord": 1,
    "FeatureLevelRecord": 6,
    "ConfigRecord": 1,
    "EndTransactionRecord": 1,
    "RegisterControllerRecord": 4,
    "RegisterBrokerRecord": 4,
    "BrokerRegistrationChangeRecord": 7,
    "NoOpRecord": 3565,
    "TopicRecord": 3,
    "PartitionRecord": 5,
    "RemoveTopicRecord": 2,
    "PartitionChangeRecord": 3,
}


@pytest.fixture(scope="module")
def records() -> list:
    return [r for _, b in iter_log(LOG_DIR) for r in b.records]


def test_counts_by_type_equal_an_independent_count(records) -> None:
    assert [r.offset for r in records] == list(range(3606))
    assert Counter(r.name for r in records) == COUNTS
    assert independent_counts(SEGMENT.read_bytes()) == COUNTS


def test_the_folder_is_a_kafka_log_of_a_known_cluster() -> None:
    assert detect_format(LOG_DIR) == "kafka"
    assert read_cluster_id(LOG_DIR) == "5L6g3nShT-eMCtK--X86sw"


def test_registrations_fences_and_topics(records) -> None:
    features = {
        r.fields["name"]: r.fields["feature_level"]
        for r in records
        if r.name == "FeatureLevelRecord"
    }
    assert features["metadata.version"] == 29 and features["eligible.leader.replicas.version"] == 1
    assert [(r.offset, r.fields["broker_epoch"]) for r in records if r.name == "RegisterBrokerRecord"] == [
        (11, 11), (186, 186), (3487, 3487), (3600, 3599),
    ]  # fmt: skip
    history = [
        (r.offset, r.fields["fenced"])
        for r in records
        if r.name == "BrokerRegistrationChangeRecord"
    ]
    assert history == [(12, -1), (182, 1), (187, -1), (3483, 1), (3488, -1), (3595, 1), (3601, -1)]
    topics = [
        (r.offset, r.name, r.fields["topic_id"]) for r in records if r.name.endswith("TopicRecord")
    ]
    assert topics == [
        (1169, "TopicRecord", "fVJ4Z1ZQTB-TZNDBS44j9g"),
        (1504, "RemoveTopicRecord", "fVJ4Z1ZQTB-TZNDBS44j9g"),
        (2837, "TopicRecord", "nyXeXxVUS5CsGNKqjhc6UA"),
        (2874, "RemoveTopicRecord", "nyXeXxVUS5CsGNKqjhc6UA"),
        (3516, "TopicRecord", TOPIC),
    ]


def test_eligible_leader_replicas_are_decoded_and_the_native_change_keeps_its_meaning(
    records,
) -> None:
    changes = {r.offset: r for r in records if r.name == "PartitionChangeRecord"}
    assert sorted(changes) == [3594, 3599, 3602]
    shrink = changes[3594]
    assert shrink.version == 2
    assert shrink.fields["eligible_leader_replicas"] == (1,) and shrink.fields["isr"] == ()
    # the fence: the last ISR member moves to the ELR and is the last known leader
    assert shrink.native == PartitionChangeRecord(
        TOPIC, 0, isr=(), leader=-1, eligible_leader_replicas=(1,), last_known_elr=(1,)
    )
    # its unclean restart takes it out of the ELR
    assert changes[3599].fields["eligible_leader_replicas"] == ()
    assert changes[3599].native == PartitionChangeRecord(TOPIC, 0, eligible_leader_replicas=())
    # unfenced, the last known leader leads again, RECOVERING (Kafka's balanced recovery)
    assert changes[3602].native == PartitionChangeRecord(
        TOPIC, 0, isr=(1,), leader=1, leader_recovery_state=1, last_known_elr=()
    )
    image = MetadataImage()
    for r in records:
        if not isinstance(r.native, UnmodelledKafkaRecord):
            image.replay(r.native, r.offset)
    (topic,) = image.topics.values()
    assert topic.name == "test-topic" and topic.partitions[0].leader == 1
    assert not image.brokers[1].fenced and image.brokers[1].broker_epoch == 3599


def test_the_checkpoint_snapshot_holds_the_clusters_image() -> None:
    records = [r for b in iter_file(SNAPSHOT) for r in b.records]
    assert [r.name for r in records] == [
        "SnapshotHeaderRecord",
        *["FeatureLevelRecord"] * 6,
        "RegisterBrokerRecord",
        "RegisterControllerRecord",
        "TopicRecord",
        "PartitionRecord",
        "ConfigRecord",
        "SnapshotFooterRecord",
    ]
    assert (
        records[0].native == SnapshotHeader(1775494929413)
        and records[-1].native == SnapshotFooter()
    )
    image = MetadataImage()
    image.apply_snapshot_records(
        [r.native for r in records[1:-1] if not isinstance(r.native, UnmodelledKafkaRecord)], 46533
    )
    assert image.brokers[1].broker_epoch == 3599
    assert image.topics[TOPIC].partitions[0].partition_epoch == 3


@pytest.mark.parametrize("path", [SEGMENT, SNAPSHOT], ids=["segment", "checkpoint"])
def test_our_writer_re_encodes_kafkas_bytes_exactly(path: Path) -> None:
    assert_reencodes_exactly(path)
