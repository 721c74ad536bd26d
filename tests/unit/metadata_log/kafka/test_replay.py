"""replay_kafka_log: a Kafka folder (snapshot, then segments) gives the image the
native folder of the same story gives, at the end and at any offset; real Kafka
logs replay with their unmodelled records counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from metadata_log.kafka.batch import iter_batch_headers
from metadata_log.kafka.reader import decode_batch, log_files, native_records
from metadata_log.kafka.replay import replay_kafka_log
from metadata_log.kafka.writer import write_kafka_log
from metadata_log.replay import replay_log, segment_files, snapshot_files
from spark_replay.generator import generate, scaled_config

FIXTURES = Path(__file__).parents[3] / "fixtures" / "kafka"


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("retained")
    cfg = scaled_config(
        3000, 11, segment_bytes=48 * 1024, snapshot_at=(0.4,), delete_before_snapshot=True
    )
    generate(root / "native", cfg)
    write_kafka_log(root / "native", root / "kafka")
    return root / "native", root / "kafka"


def test_snapshot_then_segments_give_the_native_image(story) -> None:
    native, kafka = story
    (snap_end, _, _), *_ = snapshot_files(kafka / "__cluster_metadata-0")
    assert segment_files(kafka / "__cluster_metadata-0")[0][0] > 0  # retention dropped the start
    result = replay_kafka_log(kafka)
    assert result.image == replay_log(native) and not result.unmodelled
    for upto in (snap_end - 1, snap_end + 7, 2500):
        assert replay_kafka_log(kafka, upto).image == replay_log(native, upto), upto


def test_real_logs_replay_counting_what_the_model_does_not_hold() -> None:
    ldi = replay_kafka_log(FIXTURES / "ldi-poc")
    assert ldi.unmodelled == {
        "ZkMigrationStateRecord": 1, "RegisterControllerRecord": 1, "ProducerIdsRecord": 1,
    }  # fmt: skip
    assert ldi.image.offset == 4928 and ldi.image.brokers[1].fenced
    snap = replay_kafka_log(FIXTURES / "kafka-4x-rig-snapshot")
    assert snap.unmodelled == {"RegisterControllerRecord": 1}
    assert snap.image.offset == 46532 and snap.image.brokers[1].broker_epoch == 3599
    datadir = replay_kafka_log(FIXTURES / "kafka-3x-datadir")
    assert not datadir.unmodelled and datadir.image.brokers[1].fenced
    assert all(p.leader == -1 for t in datadir.image.topics.values() for p in t.partitions.values())


@pytest.mark.parametrize("log", ["ldi-poc", "kafka-4x-rig", "kafka-3x-datadir"])
def test_native_records_are_decode_batchs_natives(log: str) -> None:
    (path,) = log_files(FIXTURES / log)[1]
    data = path.read_bytes()
    for h in iter_batch_headers(data, str(path)):
        batch = decode_batch(data, h, str(path))
        expected = [(r.offset, r.timestamp, r.native) for r in batch.records]
        assert native_records(data, h, str(path)) == expected
