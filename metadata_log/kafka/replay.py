"""Replay a Kafka `__cluster_metadata` folder into this project's MetadataImage.

The Kafka-format twin of `metadata_log.replay.replay_log`, with the same rules:
the newest usable `.checkpoint` snapshot (header, records, footer) then the
segments after it, offsets contiguous, a torn tail only at the very end. Records
go in through their native meaning (`KafkaRecord.native`); those the model does
not hold (ACLs, SCRAM, quotas, producer ids, ...) are counted by name in the
result, never silently dropped.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from metadata_log.errors import MetadataLogError
from metadata_log.image import MetadataImage
from metadata_log.kafka.reader import iter_file, iter_native_batches
from metadata_log.kafka.record_serde import UnmodelledKafkaRecord
from metadata_log.records import NoOpRecord, SnapshotHeader
from metadata_log.replay import metadata_dir, segment_files, snapshot_files
from metadata_log.snapshot import SnapshotOrder

_NOOP = NoOpRecord()


@dataclass
class KafkaReplay:
    image: MetadataImage
    unmodelled: Counter[str] = field(default_factory=Counter)


def _read_snapshot(path: Path, end_offset: int, result: KafkaReplay) -> None:
    header: SnapshotHeader | None = None
    order = SnapshotOrder(path)
    image = result.image
    for batch in iter_file(path):
        natives = []
        control = batch.header.control
        for r in batch.records:
            order.see(r.offset, r.name, control)
            match r.native:
                case SnapshotHeader() as h:
                    header = h
                case UnmodelledKafkaRecord(name=name):
                    result.unmodelled[name] += 1
                case native if not control:
                    natives.append(native)
        image.apply_snapshot_records(natives, end_offset)
    order.finish()
    assert header is not None  # finish() saw it
    image.offset = end_offset - 1
    image.last_append_time_ms = header.last_contained_log_time


def replay_kafka_log(log_dir: str | Path, upto_offset: int | None = None) -> KafkaReplay:
    """The image after every record with offset <= upto_offset (all when None)."""
    directory = metadata_dir(log_dir)
    result = KafkaReplay(MetadataImage())
    snaps = [s for s in snapshot_files(directory) if upto_offset is None or s[0] - 1 <= upto_offset]
    if snaps:
        end, _epoch, path = snaps[-1]
        _read_snapshot(path, end, result)
    image = result.image
    segments = segment_files(directory)
    for i, (_base, path) in enumerate(segments):
        for _h, natives in iter_native_batches(path, allow_torn_tail=i == len(segments) - 1):
            for offset, timestamp, native in natives:
                if offset <= image.offset:
                    continue
                if upto_offset is not None and offset > upto_offset:
                    return result
                if offset != image.offset + 1:
                    raise MetadataLogError(
                        f"{path}: gap in the log, offset {offset} follows {image.offset}"
                    )
                if isinstance(native, UnmodelledKafkaRecord):
                    result.unmodelled[native.name] += 1
                    image.replay(_NOOP, offset)  # its offset is consumed all the same
                else:
                    image.replay(native, offset)
                image.last_append_time_ms = max(image.last_append_time_ms, timestamp)
    return result
