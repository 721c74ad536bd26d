"""metadata_log.kafka.record_serde.native_values, the tuple decoder of the partition
records a replay reads by the million, equals the reference: the native fields
NATIVE_FIELDS takes from decode_value's dict, for PartitionRecord and
PartitionChangeRecord at every version (hypothesis, the tests' own encoder), and
it gives up (None) wherever the reference fails or keeps more than it returns."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metadata_log.kafka.record_serde import NATIVE_FIELDS, decode_value, native_values
from metadata_log.kafka.schemas import METADATA_SCHEMAS
from tests.unit.metadata_log.kafka import wire_encoder
from tests.unit.metadata_log.kafka.strategies import struct_values

HOT = [
    pytest.param(key, schema, v, id=f"{schema['name']}-v{v}")
    for key, schema in METADATA_SCHEMAS.items()
    if schema["name"] in NATIVE_FIELDS
    for v in range(schema["versions"][0], schema["versions"][1] + 1)
]
FAST = settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


def test_every_version_of_both_partition_records_is_covered() -> None:
    assert {p.id for p in HOT} == {
        f"{name}-v{v}" for name in ("PartitionRecord", "PartitionChangeRecord") for v in (0, 1, 2)
    }


@pytest.mark.parametrize(("key", "schema", "version"), HOT)
def test_native_values_equal_the_reference(key, schema, version) -> None:
    @FAST
    @given(struct_values(schema["fields"], version))
    def check(value: dict) -> None:
        framed = wire_encoder.metadata_value(key, schema, version, value)
        name, _, _, fields = decode_value(None, framed, 0, control=False)
        assert native_values(framed) == (name, NATIVE_FIELDS[name](fields))

    check()


@pytest.mark.parametrize(("key", "schema", "version"), HOT)
def test_a_cut_or_padded_body_or_an_unknown_tag_is_left_to_the_reference(
    key, schema, version
) -> None:
    @FAST
    @given(struct_values(schema["fields"], version), st.data())
    def check(value: dict, data: st.DataObject) -> None:
        framed = wire_encoder.metadata_value(key, schema, version, value)
        cut = data.draw(st.integers(0, len(framed) - 1))
        assert native_values(framed[:cut]) is None
        assert native_values(framed + b"\x00") is None  # bytes after the body
        # an unknown tag (kept by the dict decoder under _unknown_tagged_fields): the
        # value with its tagged fields at their defaults ends with a 0 tag count
        plain = {
            f["name"]: f["default"] if f["tag"] is not None else value[f["name"]]
            for f in schema["fields"]
            if f["name"] in value
        }
        framed = wire_encoder.metadata_value(key, schema, version, plain)
        assert framed.endswith(b"\x00")
        tagged = framed[:-1] + bytes([1, 30, 1, 0x2A])  # one field, tag 30, 1 byte
        assert "_unknown_tagged_fields" in decode_value(None, tagged, 0, control=False)[3]
        assert native_values(tagged) is None

    check()


def test_other_records_and_unknown_versions_are_not_its_job() -> None:
    topic = METADATA_SCHEMAS[2]
    value = wire_encoder.metadata_value(2, topic, 0, {"name": "t", "topic_id": "A" * 22})
    assert native_values(value) is None
    pcr = METADATA_SCHEMAS[5]
    body = {f["name"]: f["default"] for f in pcr["fields"]}
    newer = bytearray(wire_encoder.metadata_value(5, pcr, 0, body))
    newer[2] = pcr["versions"][1] + 1  # a version newer than the tables know
    assert native_values(bytes(newer)) is None
    assert native_values(b"") is None and native_values(b"\x02\x05\x00") is None


PCR = METADATA_SCHEMAS[5]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_partition_changes_many_at_once_equal_native_values(version: int) -> None:
    """columnar.partition_changes, the numpy reader of many PartitionChangeRecords,
    gives native_values' tuple for each, or None where it leaves the value to it;
    it takes every value of the common shapes (short arrays, one-byte tags)."""
    from metadata_log.kafka.columnar import partition_changes

    value_or_junk = st.one_of(
        struct_values(PCR["fields"], version).map(
            lambda v: wire_encoder.metadata_value(5, PCR, version, v)
        ),
        st.binary(max_size=40).map(lambda b: bytes([1, 5, version]) + b),  # junk bodies
        st.sampled_from(list(range(3))).flatmap(  # another version's value
            lambda w: struct_values(PCR["fields"], w).map(
                lambda v: wire_encoder.metadata_value(5, PCR, w, v)
            )
        ),
    )

    taken = [0]

    @FAST
    @given(st.lists(value_or_junk, max_size=12))
    def check(values: list[bytes]) -> None:
        got = partition_changes(values)
        assert len(got) == len(values)
        for value, row in zip(values, got, strict=True):
            if row is not None:
                reference = native_values(value)
                assert reference is not None and row == reference[1]
                taken[0] += 1

    check()
    assert taken[0] > 20


def test_partition_changes_takes_the_shapes_kafka_writes() -> None:
    from metadata_log.kafka.columnar import partition_changes

    topic = "gSnfpEbtQfSDpxM2lhEn9A"
    default = {f["name"]: f["default"] for f in PCR["fields"]}
    shapes = [
        (0, {"isr": (1, 2)}),
        (0, {"leader": 3}),
        (1, {"isr": (1, 2, 3), "leader": -1}),
        (1, {"replicas": (4, 5, 6), "isr": (4,), "leader": 4, "directories": ("A" * 22,) * 3}),
        (
            1,
            {"isr": (), "leader_recovery_state": 1, "adding_replicas": (), "removing_replicas": ()},
        ),
        (2, {"leader": 2, "eligible_leader_replicas": (1, 3), "last_known_elr": ()}),
        (2, {"isr": (2,), "eligible_leader_replicas": None, "last_known_elr": (-7,)}),
        (2, {}),
    ]
    values = [
        wire_encoder.metadata_value(
            5, PCR, v, {**default, "topic_id": topic, "partition_id": 7 + i, **change}
        )
        for i, (v, change) in enumerate(shapes)
    ]
    got = partition_changes(values)
    assert got == [native_values(v)[1] for v in values]  # every one taken, all equal
    assert got[0][:4] == (topic, 7, (1, 2), -2)
