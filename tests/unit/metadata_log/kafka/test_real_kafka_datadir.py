"""A whole Kafka data dir as Kafka left it (metadata.version 3.3-IV3, level 8):
`__cluster_metadata-0` with real `.index`/`.timeindex` files, `bootstrap.checkpoint`,
two data partitions and Kafka's checkpoint files. dump-log takes the data dir as
given; the broker's controlled shutdown, its partitions going leaderless and its
fence are pinned, with counts and byte-exact re-encoding. Origin:
tests/fixtures/kafka/README.md."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import pytest

from kraft.tools import dump_log
from metadata_log.kafka.reader import iter_file, iter_log, read_cluster_id
from metadata_log.records import BrokerRegistrationChangeRecord, PartitionChangeRecord
from tests.unit.metadata_log.kafka.independent import assert_reencodes_exactly, independent_counts

DATA_DIR = Path(__file__).parents[3] / "fixtures" / "kafka" / "kafka-3x-datadir"
SEGMENT = DATA_DIR / "__cluster_metadata-0" / "00000000000000000000.log"
COUNTS = {
    "LeaderChangeMessage": 1,
    "FeatureLevelRecord": 1,
    "RegisterBrokerRecord": 1,
    "BrokerRegistrationChangeRecord": 3,
    "NoOpRecord": 2701,
    "TopicRecord": 2,
    "PartitionRecord": 2,
    "PartitionChangeRecord": 4,
}


@pytest.fixture(scope="module")
def records() -> list:
    return [r for _, b in iter_log(DATA_DIR) for r in b.records]


def test_the_data_dir_dumps_as_given_passing_over_everything_else() -> None:
    out = io.StringIO()
    dump_log.dump(DATA_DIR, False, 0, out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("Skipping 6 files that hold no record batches: ")
    assert "00000000000000000000.index, 00000000000000000000.timeindex" in lines[0]
    assert lines[1] == f"Dumping {SEGMENT}"
    assert sum(1 for line in lines if line.startswith("| offset: ")) == 2715
    assert read_cluster_id(DATA_DIR) == "Il_m3AcETy6WHdR0mNjKUw"


def test_counts_by_type_equal_an_independent_count(records) -> None:
    assert [r.offset for r in records] == list(range(2715))
    assert Counter(r.name for r in records) == COUNTS == independent_counts(SEGMENT.read_bytes())
    assert {(r.name, r.version) for r in records if r.name.startswith(("Register", "Partition"))} == {
        ("RegisterBrokerRecord", 2), ("PartitionRecord", 0), ("PartitionChangeRecord", 0),
    }  # fmt: skip


def test_controlled_shutdown_then_leaderless_partitions_then_fence(records) -> None:
    tail = [(r.offset, r.native) for r in records if r.offset >= 2709]
    topics = {r.fields["name"]: r.fields["topic_id"] for r in records if r.name == "TopicRecord"}
    test_topic, my_topic = topics["test-topic"], topics["my-topic"]
    assert tail == [
        (2709, BrokerRegistrationChangeRecord(1, 2, fenced=0, in_controlled_shutdown=1)),
        (2710, PartitionChangeRecord(test_topic, 0, leader=-1)),
        (2711, PartitionChangeRecord(my_topic, 0, leader=-1)),
        (2712, PartitionChangeRecord(test_topic, 0, leader=-1)),
        (2713, PartitionChangeRecord(my_topic, 0, leader=-1)),
        (2714, BrokerRegistrationChangeRecord(1, 2, fenced=1, in_controlled_shutdown=0)),
    ]
    assert records[3].native == BrokerRegistrationChangeRecord(1, 2, fenced=-1)


def test_bootstrap_checkpoint_is_a_snapshot_of_the_metadata_version() -> None:
    records = [r for b in iter_file(DATA_DIR / "bootstrap.checkpoint") for r in b.records]
    assert [(r.name, r.fields) for r in records] == [
        ("SnapshotHeaderRecord", {"version": 0, "last_contained_log_timestamp": 0}),
        ("FeatureLevelRecord", {"name": "metadata.version", "feature_level": 8}),
        ("SnapshotFooterRecord", {"version": 0}),
    ]


@pytest.mark.parametrize(
    "name", ["__cluster_metadata-0/00000000000000000000.log", "bootstrap.checkpoint"]
)
def test_our_writer_re_encodes_kafkas_bytes_exactly(name: str) -> None:
    assert_reencodes_exactly(DATA_DIR / name)
