"""Every record type round-trips through the codec; bad input names its offset."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_log.errors import RecordDecodeError
from metadata_log.records import (
    CONTROL_RECORD_TYPES,
    DATA_RECORD_TYPES,
    AbortTransactionRecord,
    BeginTransactionRecord,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    Endpoint,
    EndTransactionRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    KRaftVersionRecord,
    LeaderChangeMessage,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    SnapshotFooter,
    SnapshotHeader,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    VoterEntry,
    VotersRecord,
    decode_record,
    encode_record,
    is_control,
    record_fields,
)

ints = st.integers(min_value=-(2**31), max_value=2**63 - 1)
small = st.integers(min_value=-2, max_value=10_000)
text = st.text(max_size=30)
replicas = st.lists(st.integers(0, 10_000), max_size=8).map(tuple)
endpoints = st.lists(
    st.builds(Endpoint, text, text, st.integers(0, 65535), st.sampled_from(["PLAINTEXT", "SSL"])),
    max_size=3,
).map(tuple)
features = st.lists(st.builds(BrokerFeature, text, small, small), max_size=3).map(tuple)

STRATEGIES = {
    RegisterBrokerRecord: st.builds(
        RegisterBrokerRecord,
        small,
        text,
        ints,
        endpoints,
        features,
        st.none() | text,
        st.booleans(),
        st.booleans(),
    ),
    UnregisterBrokerRecord: st.builds(UnregisterBrokerRecord, small, ints),
    TopicRecord: st.builds(TopicRecord, text, text),
    PartitionRecord: st.builds(
        PartitionRecord,
        text,
        small,
        replicas,
        replicas,
        replicas,
        replicas,
        small,
        st.sampled_from([0, 1]),
        small,
        small,
    ),
    ConfigRecord: st.builds(ConfigRecord, small, text, text, st.none() | text),
    PartitionChangeRecord: st.builds(
        PartitionChangeRecord,
        text,
        small,
        st.none() | replicas,
        small,
        st.none() | replicas,
        st.none() | replicas,
        st.none() | replicas,
        st.sampled_from([-1, 0, 1]),
    ),
    FenceBrokerRecord: st.builds(FenceBrokerRecord, small, ints),
    UnfenceBrokerRecord: st.builds(UnfenceBrokerRecord, small, ints),
    RemoveTopicRecord: st.builds(RemoveTopicRecord, text),
    FeatureLevelRecord: st.builds(FeatureLevelRecord, text, small),
    BrokerRegistrationChangeRecord: st.builds(
        BrokerRegistrationChangeRecord,
        small,
        ints,
        st.sampled_from([-1, 0, 1]),
        st.sampled_from([0, 1]),
    ),
    NoOpRecord: st.just(NoOpRecord()),
    BeginTransactionRecord: st.builds(BeginTransactionRecord, text),
    EndTransactionRecord: st.just(EndTransactionRecord()),
    AbortTransactionRecord: st.builds(AbortTransactionRecord, text),
    LeaderChangeMessage: st.builds(LeaderChangeMessage, small, replicas, replicas),
    SnapshotHeader: st.builds(SnapshotHeader, ints),
    SnapshotFooter: st.just(SnapshotFooter()),
    KRaftVersionRecord: st.builds(KRaftVersionRecord, small),
    VotersRecord: st.builds(
        VotersRecord,
        st.lists(st.builds(VoterEntry, small, text, text), max_size=5).map(tuple),
    ),
}


def test_every_record_type_has_a_strategy() -> None:
    assert set(STRATEGIES) == set(DATA_RECORD_TYPES) | set(CONTROL_RECORD_TYPES)


@pytest.mark.parametrize("cls", list(STRATEGIES), ids=lambda c: c.__name__)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_round_trip(cls: type, data: st.DataObject) -> None:
    rec = data.draw(STRATEGIES[cls])
    decoded = decode_record(encode_record(rec), 42, control=is_control(rec))
    assert decoded == rec
    assert type(decoded) is cls
    assert set(record_fields(rec)) == set(record_fields(decoded))


def test_unknown_type_names_offset() -> None:
    with pytest.raises(RecordDecodeError, match=r"offset 17: unknown record type 99"):
        decode_record(msgpack.packb([99, 0, 1]), 17)


def test_control_and_data_id_spaces_are_separate() -> None:
    # id 2 is TopicRecord in data batches, LeaderChangeMessage in control batches
    raw = encode_record(LeaderChangeMessage(1, (1, 2, 3), (1, 2)))
    assert isinstance(decode_record(raw, 0, control=True), LeaderChangeMessage)
    with pytest.raises(RecordDecodeError, match="offset 5"):
        decode_record(raw, 5, control=False)


def test_newer_version_is_an_error_not_a_skip() -> None:
    raw = msgpack.packb([FenceBrokerRecord.TYPE, 7, 1, 2])
    with pytest.raises(RecordDecodeError, match=r"offset 9: FenceBrokerRecord version 7 is newer"):
        decode_record(raw, 9)


@pytest.mark.parametrize(
    "wire, reason",
    [
        ([FenceBrokerRecord.TYPE, 0, "one", 2], "field id has a bad value"),
        ([FenceBrokerRecord.TYPE, 0, 1], "has 2 fields, record carries 1"),
        ([FenceBrokerRecord.TYPE, 0, 1, 2, 3], "has 2 fields, record carries 3"),
        (
            [PartitionRecord.TYPE, 0, "t", 0, [1, "x"], [1], [], [], 1, 0, 0, 0],
            "field replicas has a bad value",
        ),
        ([PartitionRecord.TYPE, 0, "t", 0, [1], [1]], "version 0 has 10 fields, record carries 4"),
        (
            [RegisterBrokerRecord.TYPE, 0, 1, "u", 5, [["n", "h"]], [], None, True, False],
            "malformed RegisterBrokerRecord",
        ),
        ({"type": 0}, "not an array"),
    ],
)
def test_malformed_record_names_offset(wire: object, reason: str) -> None:
    with pytest.raises(RecordDecodeError, match=rf"offset 3.*{reason}"):
        decode_record(msgpack.packb(wire), 3)


def test_garbage_bytes() -> None:
    with pytest.raises(RecordDecodeError, match="offset 8: not valid msgpack"):
        decode_record(b"\xc1\xc1", 8)


def test_encode_rejects_unsupported_version() -> None:
    with pytest.raises(ValueError, match="version 3 is not supported"):
        encode_record(NoOpRecord(), version=3)
