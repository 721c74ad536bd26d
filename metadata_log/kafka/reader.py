"""Read a Kafka `__cluster_metadata` segment or `.checkpoint` snapshot, batch by batch.

Files are only opened for reading. An incomplete batch at the end of the data is
the end of data, as for the native reader (a live log may be mid-append); the
caller decides what a torn tail means. With `skipped` given, a record of an
unknown api key or newer version is counted there (by name) and left out rather
than raised; anything else wrong is an error naming the file and offset.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from metadata_log.errors import RecordDecodeError
from metadata_log.kafka.batch import KafkaBatchHeader, parse_header, raw_records
from metadata_log.kafka.records import KafkaRecord, UnknownKafkaRecordError, decode_record


@dataclass(frozen=True, slots=True)
class KafkaBatch:
    header: KafkaBatchHeader
    records: list[KafkaRecord]


def decode_batch(
    buf: bytes | memoryview, h: KafkaBatchHeader, path: str, skipped: Counter[str] | None = None
) -> KafkaBatch:
    """Decode the records of a verified batch."""
    out = []
    for raw in raw_records(buf, h, path):
        try:
            out.append(decode_record(raw.key, raw.value, raw.offset, raw.timestamp, h.control))
        except UnknownKafkaRecordError as e:
            if skipped is None:
                raise e.at(path) from None
            skipped[e.name] += 1
        except RecordDecodeError as e:
            raise e.at(path) from None
    return KafkaBatch(h, out)


def iter_batches(
    buf: bytes | memoryview, path: str, skipped: Counter[str] | None = None, pos: int = 0
) -> Iterator[KafkaBatch]:
    """Every batch of a Kafka-format file; raises IncompleteBatchError at a torn tail."""
    while pos < len(buf):
        h = parse_header(buf, pos, path)
        yield decode_batch(buf, h, path, skipped)
        pos += h.size
