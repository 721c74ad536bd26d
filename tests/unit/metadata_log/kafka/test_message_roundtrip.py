"""Every metadata and control record at every version: the tests' encoder, the
production encoder and the decoder agree (hypothesis), and record batches of any
codec decode to what was written."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metadata_log.kafka.batch import iter_batch_headers, raw_records, records_of
from metadata_log.kafka.compiled import compile_message
from metadata_log.kafka.message import decode_message
from metadata_log.kafka.reader import iter_batches
from metadata_log.kafka.record_serde import decode_value
from metadata_log.kafka.schemas import CONTROL_SCHEMAS, METADATA_SCHEMAS
from metadata_log.kafka.writer import encode_struct
from tests.unit.metadata_log.kafka import wire_encoder
from tests.unit.metadata_log.kafka.strategies import struct_values

CASES = [
    pytest.param(kind, key, schema, v, id=f"{schema['name']}-v{v}")
    for kind, table in (("metadata", METADATA_SCHEMAS), ("control", CONTROL_SCHEMAS))
    for key, schema in table.items()
    for v in range(schema["versions"][0], schema["versions"][1] + 1)
]
# Derandomized: the same examples on every run (the suite is deterministic).
FAST = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_every_record_type_kafka_3_3_to_4_0_writes_is_covered() -> None:
    names = {s["name"] for s in METADATA_SCHEMAS.values()}
    assert {
        "RegisterBrokerRecord", "UnregisterBrokerRecord", "TopicRecord", "PartitionRecord",
        "ConfigRecord", "PartitionChangeRecord", "AccessControlEntryRecord",
        "RemoveAccessControlEntryRecord", "FenceBrokerRecord", "UnfenceBrokerRecord",
        "RemoveTopicRecord", "DelegationTokenRecord", "UserScramCredentialRecord",
        "FeatureLevelRecord", "ClientQuotaRecord", "ProducerIdsRecord",
        "BrokerRegistrationChangeRecord", "NoOpRecord", "ZkMigrationStateRecord",
        "RemoveUserScramCredentialRecord", "BeginTransactionRecord", "EndTransactionRecord",
        "AbortTransactionRecord", "RemoveDelegationTokenRecord", "RegisterControllerRecord",
        "ClearElrRecord",
    } <= names  # fmt: skip
    assert {s["name"] for s in CONTROL_SCHEMAS.values()} == {
        "LeaderChangeMessage", "SnapshotHeaderRecord", "SnapshotFooterRecord",
        "KRaftVersionRecord", "VotersRecord",
    }  # fmt: skip
    assert METADATA_SCHEMAS[5]["versions"] == (0, 2)  # PartitionChangeRecord: ELR in v2
    assert METADATA_SCHEMAS[0]["versions"] == (0, 3)  # RegisterBrokerRecord: log dirs in v3


@pytest.mark.parametrize(("kind", "key", "schema", "version"), CASES)
def test_body_round_trips_through_both_encoders_and_the_decoder(kind, key, schema, version) -> None:
    compiled = compile_message(schema, version)

    @FAST
    @given(struct_values(schema["fields"], version))
    def check(value: dict) -> None:
        body = wire_encoder.message_bytes(schema, version, value)
        assert encode_struct(schema["fields"], version, value) == body
        assert decode_message(schema, version, body) == value
        assert compiled(body, 0) == (value, len(body))  # the generated decoder agrees
        if kind == "metadata":
            framed = wire_encoder.metadata_value(key, schema, version, value)
            assert decode_value(None, framed, 0, control=False) == (
                schema["name"],
                key,
                version,
                value,
            )
        elif version == 0:  # Kafka reads KRaft control records at version 0
            got = decode_value(wire_encoder.control_key(key), body, 0, control=True)
            assert got == (schema["name"], key, 0, value)

    check()


@pytest.mark.parametrize(("kind", "key", "schema", "version"), CASES)
def test_a_body_cut_anywhere_is_a_clear_error(kind, key, schema, version) -> None:
    compiled = compile_message(schema, version)

    @FAST
    @given(struct_values(schema["fields"], version), st.data())
    def check(value: dict, data: st.DataObject) -> None:
        body = wire_encoder.message_bytes(schema, version, value)
        cut = data.draw(st.integers(0, len(body) - 1))
        with pytest.raises(ValueError, match=r"record body|runs past|ends at byte|inside a varint"):
            decode_message(schema, version, body[:cut])
        try:  # the generated decoder fails too (its caller then asks the reference why)
            _, end = compiled(body[:cut], 0)
        except (ValueError, IndexError, struct.error):
            return
        assert end != cut, "a cut body decoded"

    check()


_NOOP = wire_encoder.metadata_value(20, METADATA_SCHEMAS[20], 0, {})


@FAST
@given(
    st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"]),
    st.lists(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=5), min_size=1, max_size=4),
    st.integers(0, 2**40),
)
def test_batches_of_every_codec_decode_to_their_records(codec, batches, time_ms) -> None:
    fence = METADATA_SCHEMAS[17]
    data = b""
    offset = 0
    expected = []
    for ids in batches:
        records = []
        for broker in ids:
            value = {"broker_id": broker, "broker_epoch": 7, "fenced": 1, "in_controlled_shutdown": 0,
                     "log_dirs": ()}  # fmt: skip
            records.append((None, wire_encoder.metadata_value(17, fence, 2, value)))
            expected.append((offset + len(records) - 1, "BrokerRegistrationChangeRecord", broker))
        records.append((None, _NOOP))
        expected.append((offset + len(records) - 1, "NoOpRecord", None))
        data += wire_encoder.batch(offset, 3, time_ms, records, codec=codec)
        offset += len(records)
    got = [
        (r.offset, r.name, r.fields.get("broker_id"))
        for b in iter_batches(data, "<test>")
        for r in b.records
    ]
    assert got == expected
    for h in iter_batch_headers(data, "<test>"):  # the fast path equals the reference
        reference = [(r.offset, r.timestamp, r.key, r.value) for r in raw_records(data, h, "t")]
        assert records_of(data, h, "t") == reference
    assert all(h.codec == codec for h in iter_batch_headers(data, "<test>"))
    assert {
        r.timestamp for h in iter_batch_headers(data, "<test>") for r in raw_records(data, h, "t")
    } == {time_ms}
