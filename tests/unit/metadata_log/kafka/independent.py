"""Checks of real Kafka logs that share nothing with the reader but the bytes."""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path

from metadata_log.kafka.batch import iter_batch_headers, raw_records, records_of
from metadata_log.kafka.record_serde import decode_value
from metadata_log.kafka.schemas import CONTROL_SCHEMAS, METADATA_SCHEMAS
from metadata_log.kafka.writer import encode_batch, encode_control, encode_metadata_value


def independent_counts(data: bytes) -> Counter[str]:
    """Record names counted straight from the bytes: batch length, record varints,
    the frame's api key or the control key's type, and nothing of the reader."""

    def varint(pos: int) -> tuple[int, int]:
        shift = value = 0
        while True:
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return (value >> 1) ^ -(value & 1), pos

    names: Counter[str] = Counter()
    pos = 0
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        (attributes,) = struct.unpack_from(">h", data, pos + 21)
        (count,) = struct.unpack_from(">i", data, pos + 57)
        assert attributes & 0x7 == 0  # this fixture is uncompressed
        rec = pos + 61
        for _ in range(count):
            size, body = varint(rec)
            p = body + 1  # attributes
            _, p = varint(p)  # timestamp delta
            _, p = varint(p)  # offset delta
            klen, p = varint(p)
            key = data[p : p + klen] if klen >= 0 else None
            p += max(klen, 0)
            _, p = varint(p)  # value length
            if attributes & 0x20:
                names[CONTROL_SCHEMAS[struct.unpack(">h", key[2:4])[0]]["name"]] += 1
            else:
                assert data[p] == 1  # frame version
                names[METADATA_SCHEMAS[data[p + 1]]["name"]] += 1  # api keys < 128
            rec = body + size
        pos += 12 + length
    return names


def assert_reencodes_exactly(path: Path) -> None:
    """Every record value and batch of a Kafka-written file, decoded and written again
    by metadata_log.kafka.writer, is byte for byte what Kafka wrote (and aiokafka's
    record reader gives what the Python reference reader gives)."""
    data = path.read_bytes()
    name = str(path)
    for h in iter_batch_headers(data, name):
        pairs = []
        for r in raw_records(data, h, name):
            kafka_name, _key, version, fields = decode_value(r.key, r.value, r.offset, h.control)
            if h.control:
                pair = encode_control(kafka_name, fields)
            else:
                pair = (None, encode_metadata_value(kafka_name, version, fields))
            assert pair == (r.key, r.value), r.offset
            pairs.append(pair)
        assert records_of(data, h, name) == [
            (r.offset, r.timestamp, r.key, r.value) for r in raw_records(data, h, name)
        ]
        again = encode_batch(h.base_offset, h.leader_epoch, h.base_timestamp, pairs, h.control)
        assert again == data[h.position : h.position + h.size], h.base_offset
