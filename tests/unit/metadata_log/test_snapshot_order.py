"""Every reader of a snapshot refuses the same files with the same words.

A snapshot is SnapshotHeader, data, SnapshotFooter and nothing after (it is
written whole, then renamed): `SnapshotOrder` says so once, and the native and
Kafka replays, `kraft dump-log` and spark_replay's decoder all feed it. A file
holding a snapshot twice (cat'ed, or a bad copy) is the case that slipped by.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from metadata_log.batch import encode_batch
from metadata_log.errors import MetadataLogError
from metadata_log.kafka.replay import replay_kafka_log
from metadata_log.kafka.writer import encode_native_batch
from metadata_log.records import NoOpRecord, Record, SnapshotFooter, SnapshotHeader
from metadata_log.replay import METADATA_DIR_NAME, read_snapshot_image
from metadata_log.snapshot import SnapshotOrder

NAME = "00000000000000000003-0000000001.checkpoint"


def test_the_order_is_header_data_footer_then_nothing() -> None:
    order = SnapshotOrder("s")
    for offset, name, control in (
        (0, "SnapshotHeaderRecord", True),
        (1, "KRaftVersionRecord", True),
        (2, "NoOpRecord", False),
        (3, "SnapshotFooterRecord", True),
    ):
        order.see(offset, name, control)
    order.finish()
    with pytest.raises(MetadataLogError, match="^s: data after the snapshot footer at offset 4$"):
        order.see(4, "SnapshotHeaderRecord", True)
    early = SnapshotOrder("s")
    with pytest.raises(MetadataLogError, match="^s: snapshot data before its header at offset 0$"):
        early.see(0, "NoOpRecord", False)
    for seen, missing in (([], "header"), ([(0, "SnapshotHeader", True)], "footer")):
        order = SnapshotOrder("s")
        for r in seen:
            order.see(*r)
        with pytest.raises(MetadataLogError, match=f"^s: snapshot is missing its {missing}$"):
            order.finish()


def _snapshot(encode: Callable[..., bytes], extra: list[Record]) -> bytes:
    body = [
        encode(0, 1, 1000, [SnapshotHeader(1000)], True),
        encode(1, 1, 1000, [NoOpRecord()], False),
        encode(2, 1, 1000, [SnapshotFooter(), *extra], True),
    ]
    return b"".join(body)


def test_the_native_replay_refuses_a_record_after_the_footer_in_its_batch(tmp_path: Path) -> None:
    path = tmp_path / NAME
    path.write_bytes(_snapshot(encode_batch, []))
    assert read_snapshot_image(path, 3).offset == 2
    path.write_bytes(_snapshot(encode_batch, [SnapshotHeader(1000)]))
    with pytest.raises(MetadataLogError) as e:
        read_snapshot_image(path, 3)
    assert str(e.value) == f"{path}: data after the snapshot footer at offset 3"


def test_the_kafka_replay_refuses_a_snapshot_written_twice(tmp_path: Path) -> None:
    d = tmp_path / METADATA_DIR_NAME
    d.mkdir()
    once = _snapshot(encode_native_batch, [])
    (d / NAME).write_bytes(once)
    assert replay_kafka_log(tmp_path).image.offset == 2
    (d / NAME).write_bytes(once + once)
    with pytest.raises(MetadataLogError) as e:
        replay_kafka_log(tmp_path)
    assert str(e.value) == f"{d / NAME}: data after the snapshot footer at offset 0"
