"""metadata.version decides which record versions a writer may use.

Today every record is at version 0 and metadata.version has one level, so the
gate is exercised twice: on the real tables (every record at every level
round-trips; unknown levels are refused) and on a hypothetical upgrade patched
into the tables (RegisterBrokerRecord version 1 adds in_controlled_shutdown,
allowed from metadata.version 2), which is exactly the edit a real bump makes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import fields

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import metadata_log.records as records_module
from metadata_log.batch import decode_records, encode_payload, iter_headers
from metadata_log.errors import RecordDecodeError
from metadata_log.records import (
    ALL_RECORD_TYPES,
    FIELD_COUNTS,
    LATEST_METADATA_VERSION,
    MIN_METADATA_VERSION,
    RECORD_VERSIONS,
    SUPPORTED_VERSION,
    Endpoint,
    FenceBrokerRecord,
    RegisterBrokerRecord,
    UnsupportedMetadataVersionError,
    decode_record,
    encode_record,
    record_version,
    refresh_codec_tables,
)
from tests.unit.metadata_log.test_records import STRATEGIES

REG_V0_FIELDS = 7  # everything but in_controlled_shutdown


@pytest.fixture
def upgrade(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """Patch in metadata.version LATEST+1 that allows RegisterBrokerRecord version 1."""
    level = LATEST_METADATA_VERSION + 1
    monkeypatch.setitem(FIELD_COUNTS, RegisterBrokerRecord, {0: REG_V0_FIELDS, 1: 8})
    monkeypatch.setitem(SUPPORTED_VERSION, RegisterBrokerRecord, 1)
    monkeypatch.setitem(
        RECORD_VERSIONS,
        level,
        {**RECORD_VERSIONS[LATEST_METADATA_VERSION], RegisterBrokerRecord: 1},
    )
    refresh_codec_tables()
    yield level
    monkeypatch.undo()
    refresh_codec_tables()


def reg(in_controlled_shutdown: bool = False) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        1,
        "inc",
        7,
        (Endpoint("PLAINTEXT", "h", 9092),),
        rack="r",
        fenced=True,
        in_controlled_shutdown=in_controlled_shutdown,
    )


def test_tables_are_consistent() -> None:
    assert set(RECORD_VERSIONS) == set(range(MIN_METADATA_VERSION, LATEST_METADATA_VERSION + 1))
    for level, versions in RECORD_VERSIONS.items():
        assert set(versions) == set(ALL_RECORD_TYPES), level
        for cls, v in versions.items():
            assert 0 <= v <= SUPPORTED_VERSION[cls]
    for cls in ALL_RECORD_TYPES:
        counts = FIELD_COUNTS[cls]
        assert sorted(counts) == list(range(SUPPORTED_VERSION[cls] + 1))
        assert list(counts.values()) == sorted(counts.values())  # versions only add fields
        # The latest version is written by every level that allows it: it carries all fields.
        assert counts[SUPPORTED_VERSION[cls]] == len(fields(cls))


@pytest.mark.parametrize("cls", list(STRATEGIES), ids=lambda c: c.__name__)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_every_record_round_trips_at_every_level(cls: type, data: st.DataObject) -> None:
    rec = data.draw(STRATEGIES[cls])
    control = cls in records_module.CONTROL_RECORD_TYPES
    for level in RECORD_VERSIONS:
        raw = encode_record(rec, metadata_version=level)
        assert msgpack.unpackb(raw)[1] == record_version(cls, level)
        assert decode_record(raw, 0, control=control) == rec


@pytest.mark.parametrize("level", [MIN_METADATA_VERSION - 1, LATEST_METADATA_VERSION + 1, -5])
def test_unknown_level_is_refused(level: int) -> None:
    with pytest.raises(UnsupportedMetadataVersionError, match=f"metadata.version {level} is not"):
        encode_record(FenceBrokerRecord(1, 2), metadata_version=level)


def test_old_level_writes_the_old_version(upgrade: int) -> None:
    raw = encode_record(reg(), metadata_version=LATEST_METADATA_VERSION)
    wire = msgpack.unpackb(raw)
    assert wire[:2] == [RegisterBrokerRecord.TYPE, 0] and len(wire) == 2 + REG_V0_FIELDS
    # Read back, the field version 0 lacks takes its default.
    assert decode_record(raw, 5) == reg()


def test_old_level_refuses_a_field_it_cannot_carry(upgrade: int) -> None:
    with pytest.raises(ValueError, match="version 0 has no field in_controlled_shutdown"):
        encode_record(reg(True), metadata_version=LATEST_METADATA_VERSION)


def test_new_level_writes_the_new_version(upgrade: int) -> None:
    raw = encode_record(reg(True), metadata_version=upgrade)
    wire = msgpack.unpackb(raw)
    assert wire[:2] == [RegisterBrokerRecord.TYPE, 1] and len(wire) == 10
    assert decode_record(raw, 5) == reg(True)
    # No level given: the newest version this code knows.
    assert encode_record(reg(True)) == raw


def test_explicit_version_above_the_level_is_refused(upgrade: int) -> None:
    with pytest.raises(UnsupportedMetadataVersionError, match="needs a higher metadata.version"):
        encode_record(reg(), 1, metadata_version=LATEST_METADATA_VERSION)


def test_version_arity_is_checked_on_read(upgrade: int) -> None:
    v1 = msgpack.unpackb(encode_record(reg(), metadata_version=upgrade))
    v1[1] = 0  # claims version 0 but carries version 1's fields
    with pytest.raises(
        RecordDecodeError, match=r"offset 9: .*version 0 has 7 fields, record carries 8"
    ):
        decode_record(msgpack.packb(v1), 9)
    # The same through a batch (the read path's fast decoders).
    batch = encode_payload(9, 1, 0, msgpack.packb(v1), 1)
    ((pos, header),) = list(iter_headers(batch, "seg.log"))
    with pytest.raises(RecordDecodeError, match=r"seg.log at offset 9: .*version 0 has 7 fields"):
        decode_records(batch, pos, header, "seg.log")


def test_a_node_that_does_not_know_the_new_version_stops(
    upgrade: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch written at the new level, read by code that knows only version 0."""
    payload = encode_record(reg(True), metadata_version=upgrade)
    batch = encode_payload(40, 1, 0, payload, 1)
    monkeypatch.setitem(SUPPORTED_VERSION, RegisterBrokerRecord, 0)  # the old reader
    refresh_codec_tables()
    ((pos, header),) = list(iter_headers(batch, "seg.log"))
    with pytest.raises(RecordDecodeError, match=r"seg.log at offset 40: .*version 1 is newer"):
        decode_records(batch, pos, header, "seg.log")


def test_the_controller_batches_at_the_images_level(upgrade: int) -> None:
    """kraft.controller.batching (the active controller's writer) honours the level."""
    from kraft.controller.batching import to_batches

    for level, version in ((LATEST_METADATA_VERSION, 0), (upgrade, 1)):
        plan = to_batches([reg(), FenceBrokerRecord(1, 7)], metadata_version=level)
        (batch,) = plan.batches
        unpacker = msgpack.Unpacker()
        unpacker.feed(batch.payload)
        wire = list(unpacker)
        assert [w[:2] for w in wire] == [[RegisterBrokerRecord.TYPE, version], [7, 0]]
    with pytest.raises(ValueError, match="has no field in_controlled_shutdown"):
        to_batches([reg(True)], metadata_version=LATEST_METADATA_VERSION)


def test_elr_fields_need_metadata_version_2() -> None:
    """KIP-966's fields are PartitionRecord / PartitionChangeRecord version 1: level
    1 cannot carry them (a cluster without ELR writes none), level 2 writes them."""
    from metadata_log.records import (
        ELR_METADATA_VERSION,
        PartitionChangeRecord,
        PartitionRecord,
    )

    change = PartitionChangeRecord("t", 0, isr=(), leader=-1, eligible_leader_replicas=(2,))
    with pytest.raises(ValueError, match="version 0 has no field eligible_leader_replicas"):
        encode_record(change, metadata_version=1)
    plain = PartitionChangeRecord("t", 0, isr=(1,))
    v0 = msgpack.unpackb(encode_record(plain, metadata_version=1))
    assert v0[:2] == [PartitionChangeRecord.TYPE, 0] and len(v0) == 2 + 8
    for rec in (change, PartitionRecord("t", 0, (1, 2), (), last_known_elr=(1,))):
        raw = encode_record(rec, metadata_version=ELR_METADATA_VERSION)
        assert msgpack.unpackb(raw)[1] == 1
        assert decode_record(raw, 3) == rec
    # a version 0 record reads back with the new fields at their defaults
    assert decode_record(encode_record(plain, metadata_version=1), 3) == plain
