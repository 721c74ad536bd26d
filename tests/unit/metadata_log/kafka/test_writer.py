"""One seeded story in both formats: the story generator writes the native log,
metadata_log.kafka.writer rewrites it as Kafka would have, and both read back to
the same records at the same offsets, snapshots included, and the same image."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from metadata_log.batch import decode_records, iter_headers
from metadata_log.image import MetadataImage
from metadata_log.kafka.reader import (
    detect_format,
    iter_file,
    iter_log,
    log_files,
    read_cluster_id,
)
from metadata_log.kafka.record_serde import decode_record as decode_kafka_record
from metadata_log.kafka.schemas import CONTROL_SCHEMAS, METADATA_SCHEMAS
from metadata_log.kafka.writer import (
    encode_control,
    encode_metadata_value,
    to_kafka,
    write_kafka_log,
)
from metadata_log.kafka.writer import (
    main as writer_main,
)
from metadata_log.records import PartitionChangeRecord, PartitionRecord, is_control
from metadata_log.replay import replay_log
from spark_replay.generator import generate, scaled_config
from tests.unit.metadata_log.kafka import wire_encoder

_KEYS = {s["name"]: k for k, s in METADATA_SCHEMAS.items()}
_CONTROL = {s["name"]: k for k, s in CONTROL_SCHEMAS.items()}


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("story")
    cfg = scaled_config(3000, 5, segment_bytes=64 * 1024, snapshot_at=(0.5,))
    generate(root / "native", cfg)
    write_kafka_log(root / "native", root / "kafka", compression="lz4")
    return root / "native" / "__cluster_metadata-0", root / "kafka" / "__cluster_metadata-0"


def native_file(path: Path) -> list[tuple[int, object]]:
    data = path.read_bytes()
    out = []
    for pos, h in iter_headers(data, str(path)):
        out += [
            (h.base_offset + i, r) for i, r in enumerate(decode_records(data, pos, h, str(path)))
        ]
    return out


def kafka_file(path: Path) -> list[tuple[int, object]]:
    return [(r.offset, r.native) for b in iter_file(path) for r in b.records]


def test_every_segment_and_snapshot_reads_back_the_same_records(story) -> None:
    native, kafka = story
    snapshots, segments = log_files(kafka.parent)
    assert [p.name for p in snapshots] == ["00000000000000001500-0000000003.checkpoint"]
    assert len(segments) == 3
    for path in snapshots + segments:
        assert kafka_file(path) == native_file(native / path.name), path.name
    kinds = Counter(type(r).__name__ for p in segments for _, r in kafka_file(p))
    # Shaped like a busy cluster's log: NoOps first, then broker and partition changes.
    assert kinds.most_common(1)[0][0] == "NoOpRecord"
    assert kinds["BrokerRegistrationChangeRecord"] > 0 and kinds["PartitionChangeRecord"] > 0


def test_both_formats_replay_to_the_same_image(story) -> None:
    native, kafka = story
    image = MetadataImage()
    for _path, batch in iter_log(kafka.parent):
        for r in batch.records:
            image.replay(r.native, r.offset)
    assert image == replay_log(native.parent)


def test_the_writer_and_the_tests_encoder_write_the_same_bytes(story) -> None:
    native, _ = story
    for _, rec in native_file(next(native.glob("*.log"))):
        name, version, fields = to_kafka(rec)
        if is_control(rec):
            key, value = encode_control(name, fields)
            full = {
                f["name"]: fields.get(f["name"], f["default"])
                for f in CONTROL_SCHEMAS[_CONTROL[name]]["fields"]
            }
            assert (key, value) == (
                wire_encoder.control_key(_CONTROL[name]),
                wire_encoder.message_bytes(CONTROL_SCHEMAS[_CONTROL[name]], 0, full),
            )
        else:
            schema = METADATA_SCHEMAS[_KEYS[name]]
            full = {f["name"]: fields.get(f["name"], f["default"]) for f in schema["fields"]}
            expected = wire_encoder.metadata_value(_KEYS[name], schema, version, full)
            assert encode_metadata_value(name, version, fields) == expected


def test_format_and_cluster_id_of_a_log_folder(story, tmp_path: Path) -> None:
    native, kafka = story
    assert detect_format(native.parent) == "kraft" and detect_format(kafka) == "kafka"
    assert read_cluster_id(kafka.parent) is None
    (kafka.parent / "meta.properties").write_text(
        "#\n#Tue Nov 25 12:00:00 UTC 2026\nnode.id=1\nversion=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\n"
    )
    assert read_cluster_id(kafka) == "MkU3OEVBNTcwNTJENDM2Qk"
    empty = tmp_path / "__cluster_metadata-0"
    empty.mkdir()
    assert detect_format(empty) is None


def test_writer_command_writes_a_compressed_copy(story, tmp_path: Path) -> None:
    native, kafka = story
    assert writer_main([str(native.parent), str(tmp_path), "--compression", "zstd"]) == 0
    for path in kafka.iterdir():
        copy = tmp_path / "__cluster_metadata-0" / path.name
        assert kafka_file(copy) == kafka_file(path)
        assert {b.header.codec for b in iter_file(copy)} == {"zstd"}


@pytest.mark.parametrize(
    "rec",
    [
        PartitionRecord("AAAAAAAAAAAAAAAAAAAAAA", 0, (1, 2, 3), (1,), leader=1),
        PartitionRecord(
            "AAAAAAAAAAAAAAAAAAAAAA",
            1,
            (1, 2, 3),
            (),
            eligible_leader_replicas=(1, 2),
            last_known_elr=(1,),
        ),
        PartitionChangeRecord("AAAAAAAAAAAAAAAAAAAAAA", 2, isr=(1, 2)),
        PartitionChangeRecord(
            "AAAAAAAAAAAAAAAAAAAAAA", 3, isr=(), leader=-1, eligible_leader_replicas=(3,)
        ),
        PartitionChangeRecord("AAAAAAAAAAAAAAAAAAAAAA", 4, last_known_elr=()),
    ],
)
def test_partition_records_keep_their_elr_in_kafkas_format(rec) -> None:
    """KIP-966's fields are tagged fields of version 2 in Kafka's schemas: a record
    that carries them is written at version 2, any other at version 1 (as a 3.7
    cluster writes it), and reads back as the same native record."""
    name, version, fields = to_kafka(rec)
    carries = (rec.eligible_leader_replicas, rec.last_known_elr) not in (((), ()), (None, None))
    assert version == (2 if carries else 1)
    value = encode_metadata_value(name, version, fields)
    assert decode_kafka_record(None, value, 7, 0, False).native == rec
