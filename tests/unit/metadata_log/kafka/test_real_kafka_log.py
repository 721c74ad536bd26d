"""A metadata log written by a real Apache Kafka (3.7, KRaft combined mode): every
record decodes, dump-log's counts equal an independent count, the cluster's
topics and broker history are pinned, and our writer re-encodes Kafka's bytes
exactly. Origin of the fixture: tests/fixtures/kafka/README.md."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from metadata_log.image import MetadataImage
from metadata_log.kafka.reader import iter_batches
from metadata_log.kafka.record_serde import UnmodelledKafkaRecord
from metadata_log.records import BrokerRegistrationChangeRecord, PartitionChangeRecord
from tests.unit.metadata_log.kafka.independent import assert_reencodes_exactly, independent_counts

FIXTURE = Path(__file__).parents[3] / "fixtures" / "kafka" / "ldi-poc"
SEGMENT = FIXTURE / "__cluster_metadata-0" / "00000000000000000000.log"

COUNTS = {
    "LeaderChangeMessage": 1,
    "BeginTransactionRecord": 1,
    "FeatureLevelRecord": 1,
    "ZkMigrationStateRecord": 1,
    "EndTransactionRecord": 1,
    "RegisterControllerRecord": 1,
    "RegisterBrokerRecord": 2,
    "BrokerRegistrationChangeRecord": 3,
    "TopicRecord": 5,
    "ConfigRecord": 3,
    "PartitionRecord": 54,
    "PartitionChangeRecord": 54,
    "ProducerIdsRecord": 1,
    "NoOpRecord": 4801,
}
BROKER_1_TOPIC = "gSnfpEbtQfSDpxM2lhEn9A"  # __consumer_offsets


@pytest.fixture(scope="module")
def records() -> list:
    data = SEGMENT.read_bytes()
    return [r for b in iter_batches(data, str(SEGMENT)) for r in b.records]


def test_every_record_decodes_in_offset_order_with_pinned_counts(records) -> None:
    assert [r.offset for r in records] == list(range(4929))
    assert Counter(r.name for r in records) == COUNTS
    assert independent_counts(SEGMENT.read_bytes()) == COUNTS


def test_dump_log_json_prints_every_record_with_kafka_names() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "kraft.cli", "dump-log", str(FIXTURE), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["offset"] for r in rows] == list(range(4929))
    assert Counter(r["type"] for r in rows) == independent_counts(SEGMENT.read_bytes())
    assert rows[2]["fields"] == {"name": "metadata.version", "feature_level": 19}
    shutdown = rows[4871]
    assert shutdown["type"] == "BrokerRegistrationChangeRecord"
    assert shutdown["fields"] == {
        "broker_id": 1,
        "broker_epoch": 8,
        "fenced": 0,
        "in_controlled_shutdown": 1,
    }
    assert set(rows[0]) == {
        "offset",
        "base_offset",
        "epoch",
        "append_time_ms",
        "control",
        "type",
        "fields",
    }


def test_topics_brokers_and_the_controlled_shutdown_then_fence(records) -> None:
    topics = {r.fields["name"]: r.fields["topic_id"] for r in records if r.name == "TopicRecord"}
    assert topics == {
        "__consumer_offsets": BROKER_1_TOPIC,
        "batch2.work.notification.SHR_PROD.persistence": "306J_pu4Tiybgh3rvq-3HQ",
        "subscription.matching.SHR_PROD.persistence": "shr_LbhQRi20mLSqvU22rA",
        "TestTopicPatient": "B3_HiNPgSQ6oxG9ZZ6ED5A",
        "Retry.TestTopicPatient": "_g4of-T3Rq-jr09kDxtjFA",
    }
    assert {r.fields["broker_id"] for r in records if r.name == "RegisterBrokerRecord"} == {1}
    # Since Kafka 3.3 the history is in BrokerRegistrationChangeRecord's tagged fields:
    # unfenced, then a controlled shutdown, then fenced.
    changes = [(r.offset, r.native) for r in records if r.name == "BrokerRegistrationChangeRecord"]
    assert changes == [
        (9, BrokerRegistrationChangeRecord(1, 8, fenced=-1, in_controlled_shutdown=0)),
        (4871, BrokerRegistrationChangeRecord(1, 8, fenced=0, in_controlled_shutdown=1)),
        (4926, BrokerRegistrationChangeRecord(1, 8, fenced=1, in_controlled_shutdown=0)),
    ]
    # Between them, every partition it led lost its leader ("no change" elsewhere).
    moved = [r for r in records if r.name == "PartitionChangeRecord" and 4871 < r.offset < 4926]
    assert len(moved) == 54
    assert all(
        r.native == PartitionChangeRecord(r.native.topic_id, r.native.partition_id, leader=-1)
        for r in moved
    )


def test_native_records_replay_into_the_clusters_image(records) -> None:
    image = MetadataImage()
    unmodelled = Counter()
    for r in records:
        if isinstance(r.native, UnmodelledKafkaRecord):
            unmodelled[r.native.name] += 1
        else:
            image.replay(r.native, r.offset)
    assert unmodelled == {
        "ZkMigrationStateRecord": 1,
        "RegisterControllerRecord": 1,
        "ProducerIdsRecord": 1,
    }
    assert {t.name: len(t.partitions) for t in image.topics.values()} == {
        "__consumer_offsets": 50,
        "batch2.work.notification.SHR_PROD.persistence": 1,
        "subscription.matching.SHR_PROD.persistence": 1,
        "TestTopicPatient": 1,
        "Retry.TestTopicPatient": 1,
    }
    broker = image.brokers[1]
    assert broker.fenced and broker.incarnation_id == "b5ae51e1-5b54-42f6-a096-db88cd20fd86"
    assert all(p.leader == -1 for t in image.topics.values() for p in t.partitions.values())


def test_our_writer_re_encodes_kafkas_bytes_exactly() -> None:
    """Kafka's own bytes as test vectors: every record value and every batch."""
    assert_reencodes_exactly(SEGMENT)
