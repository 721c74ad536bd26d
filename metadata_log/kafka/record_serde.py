"""Kafka metadata records: value framing, decoding, and the map onto native records.

A data record's value is framed as ``uvarint frame_version (1), uvarint api_key,
uvarint version`` then the body in Kafka's message serialization (Kafka's
MetadataRecordSerde); its key is null. A control record's key is ``int16
version (0), int16 type`` and its value the control message at version 0
(Kafka's ControlRecordUtils reads every KRaft control message at version 0).

Each decoded record is a `KafkaRecord`: Kafka's record name, api key, version
and every field (snake_case), plus `native`, the record of this project's model
it means (`metadata_log.records`) or an `UnmodelledKafkaRecord` carrying the name
and fields when the project has no such record (ACLs, SCRAM, quotas, delegation
tokens, producer ids, ZK migration, controller registrations, ClearElr, and
transaction markers). What the native records cannot hold is listed in
docs/kafka-log-format.md; it stays in `fields`.

An api key or version the schemas do not know is `UnknownKafkaRecordError`
(a RecordDecodeError naming file and offset), which dump-log's --skip-unknown
may count and pass over.
"""

from __future__ import annotations

import base64
import struct
import uuid
from dataclasses import dataclass
from typing import Any

from metadata_log.errors import RecordDecodeError
from metadata_log.kafka.compiled import compile_message, compile_tuple
from metadata_log.kafka.message import MessageError, decode_message, read_uvarint
from metadata_log.kafka.schemas import CONTROL_SCHEMAS, METADATA_SCHEMAS
from metadata_log.records import (
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
    Record,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    SnapshotFooter,
    SnapshotHeader,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    VoterEntry,
    VotersRecord,
)

FRAME_VERSION = 1
# (api key, version) -> (schema, generated body decoder), filled as records are met.
_READERS: dict[tuple[int, int], tuple[dict[str, Any], Any]] = {}
CONTROL_KEY = struct.Struct(">hh")
# Transaction markers (ControlRecordType ABORT/COMMIT): never in a metadata log,
# decoded anyway so that a data partition's segment does not stop the dump.
TXN_MARKERS = {0: "AbortTransactionMarker", 1: "CommitTransactionMarker"}
_TXN_MARKER_VALUE = struct.Struct(">hi")

# SecurityProtocol ids (org.apache.kafka.common.security.auth.SecurityProtocol).
SECURITY_PROTOCOLS = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}


class UnknownKafkaRecordError(RecordDecodeError):
    """An api key, control type or record version the schema tables do not know."""

    def __init__(self, offset: int, reason: str, name: str, path: str | None = None) -> None:
        super().__init__(offset, reason, path)
        self.name = name

    def at(self, path: str) -> UnknownKafkaRecordError:
        return UnknownKafkaRecordError(self.offset, self.reason, self.name, path)


@dataclass(frozen=True, slots=True)
class UnmodelledKafkaRecord:
    """A Kafka record with no native counterpart: shown and counted, never dropped."""

    name: str
    api_key: int
    version: int
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class KafkaRecord:
    offset: int
    timestamp: int
    control: bool
    name: str  # Kafka's record name, e.g. BrokerRegistrationChangeRecord
    api_key: int  # the control record type for control records
    version: int
    fields: dict[str, Any]
    native: Record | UnmodelledKafkaRecord


def decode_value(
    key: bytes | None, value: bytes | None, offset: int, control: bool
) -> tuple[str, int, int, dict[str, Any]]:
    """(name, api key or control type, version, fields) of one record; errors name `offset`."""
    if value is None:
        raise RecordDecodeError(offset, "record has a null value")
    if type(value) is not bytes:  # the generated decoders slice and decode bytes
        value = bytes(value)
    try:
        if control:
            return _decode_control(key, value, offset)
        if len(value) >= 3 and value[0] == FRAME_VERSION and value[1] < 0x80 and value[2] < 0x80:
            # The common case: one byte each for frame version, api key, version.
            api_key, version, pos = value[1], value[2], 3
        else:
            frame, pos = read_uvarint(value, 0)
            if frame != FRAME_VERSION:
                raise RecordDecodeError(offset, f"unknown metadata record frame version {frame}")
            api_key, pos = read_uvarint(value, pos)
            version, pos = read_uvarint(value, pos)
        known = _READERS.get((api_key, version))
        if known is None:
            schema = METADATA_SCHEMAS.get(api_key)
            if schema is None:
                raise UnknownKafkaRecordError(
                    offset,
                    f"unknown metadata record api key {api_key} (version {version})",
                    f"api key {api_key}",
                )
            _check_version(schema, version, offset)
            known = _READERS[(api_key, version)] = (schema, compile_message(schema, version))
        schema, reader = known
        try:
            fields, end = reader(value, pos)
        except (IndexError, struct.error, ValueError):  # ValueError: MessageError, bad UTF-8
            fields, end = None, -1
        if end != len(value):  # decode_message names the problem
            decode_message(schema, version, value, pos)
            raise MessageError(f"{schema['name']} v{version}: record body does not decode")
        return schema["name"], api_key, version, fields
    except MessageError as e:
        raise RecordDecodeError(offset, str(e)) from None


def _check_version(schema: dict[str, Any], version: int, offset: int) -> None:
    lo, hi = schema["versions"]
    if not lo <= version <= hi:
        raise UnknownKafkaRecordError(
            offset,
            f"{schema['name']} version {version} is newer than supported ({lo}-{hi})",
            f"{schema['name']} v{version}",
        )


def _decode_control(
    key: bytes | None, value: bytes, offset: int
) -> tuple[str, int, int, dict[str, Any]]:
    if key is None or len(key) < CONTROL_KEY.size:
        raise RecordDecodeError(offset, "control record key shorter than 4 bytes")
    key_version, ctype = CONTROL_KEY.unpack_from(key)
    if key_version != 0:
        raise UnknownKafkaRecordError(
            offset, f"control record key version {key_version}", "control key"
        )
    if ctype in TXN_MARKERS:
        if len(value) < _TXN_MARKER_VALUE.size:
            raise RecordDecodeError(offset, "transaction marker value shorter than 6 bytes")
        v, epoch = _TXN_MARKER_VALUE.unpack_from(value)
        return TXN_MARKERS[ctype], ctype, 0, {"version": v, "coordinator_epoch": epoch}
    schema = CONTROL_SCHEMAS.get(ctype)
    if schema is None:
        raise UnknownKafkaRecordError(
            offset, f"unknown control record type {ctype}", f"control type {ctype}"
        )
    return schema["name"], ctype, 0, decode_message(schema, 0, value)


# ------------------------------------------------------------------ to native records


ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"


def canonical_uuid(kafka_text: str) -> str:
    """Kafka's base64 Uuid text in the dashed form the native records use for
    incarnation ids (topic ids are base64 in both)."""
    return str(uuid.UUID(bytes=base64.urlsafe_b64decode(kafka_text + "==")))


def _register_broker(f: dict[str, Any]) -> Record:
    return RegisterBrokerRecord(
        broker_id=f["broker_id"],
        incarnation_id=canonical_uuid(f["incarnation_id"]),
        broker_epoch=f["broker_epoch"],
        endpoints=tuple(
            Endpoint(
                e["name"],
                e["host"],
                e["port"],
                SECURITY_PROTOCOLS.get(e["security_protocol"], str(e["security_protocol"])),
            )
            for e in f["end_points"]
        ),
        features=tuple(
            BrokerFeature(x["name"], x["min_supported_version"], x["max_supported_version"])
            for x in f["features"]
        ),
        rack=f["rack"],
        fenced=f["fenced"],
        in_controlled_shutdown=f.get("in_controlled_shutdown", False),
    )


def _partition(f: dict[str, Any]) -> Record:
    return PartitionRecord(*_partition_fields(f))


def _partition_fields(f: dict[str, Any]) -> tuple[Any, ...]:
    """A PartitionRecord's native fields, in field order, without building it."""
    return (
        f["topic_id"],
        f["partition_id"],
        f["replicas"],
        f["isr"],
        f["removing_replicas"],
        f["adding_replicas"],
        f["leader"],
        f["leader_recovery_state"],
        f["leader_epoch"],
        f["partition_epoch"],
        # KIP-966 (v2, tagged, nullable): absent or null is none
        tuple(f.get("eligible_leader_replicas") or ()),
        tuple(f.get("last_known_elr") or ()),
    )


def _partition_change(f: dict[str, Any]) -> Record:
    return PartitionChangeRecord(*_partition_change_fields(f))


def _partition_change_fields(f: dict[str, Any]) -> tuple[Any, ...]:
    """A PartitionChangeRecord's native fields, in field order, without building it."""
    return (
        f["topic_id"],
        f["partition_id"],
        f["isr"],
        f["leader"],
        f["replicas"],
        f["removing_replicas"],
        f["adding_replicas"],
        f["leader_recovery_state"],
        # KIP-966 (v2, tagged, nullable): null is unchanged
        _opt_tuple(f.get("eligible_leader_replicas")),
        _opt_tuple(f.get("last_known_elr")),
    )


def _opt_tuple(v: Any) -> tuple[int, ...] | None:
    return None if v is None else tuple(v)


def _voters(f: dict[str, Any]) -> Record:
    entries = []
    for v in f["voters"]:
        eps = v["endpoints"]
        url = f"{eps[0]['host']}:{eps[0]['port']}" if eps else ""
        directory = "" if v["voter_directory_id"] == ZERO_UUID else v["voter_directory_id"]
        entries.append(VoterEntry(v["voter_id"], directory, url))
    return VotersRecord(tuple(entries))


_TO_NATIVE: dict[str, Any] = {
    "RegisterBrokerRecord": _register_broker,
    "UnregisterBrokerRecord": lambda f: UnregisterBrokerRecord(f["broker_id"], f["broker_epoch"]),
    "TopicRecord": lambda f: TopicRecord(f["name"], f["topic_id"]),
    "PartitionRecord": _partition,
    "ConfigRecord": lambda f: ConfigRecord(
        f["resource_type"], f["resource_name"], f["name"], f["value"]
    ),
    "PartitionChangeRecord": _partition_change,
    "FenceBrokerRecord": lambda f: FenceBrokerRecord(f["id"], f["epoch"]),
    "UnfenceBrokerRecord": lambda f: UnfenceBrokerRecord(f["id"], f["epoch"]),
    "RemoveTopicRecord": lambda f: RemoveTopicRecord(f["topic_id"]),
    "FeatureLevelRecord": lambda f: FeatureLevelRecord(f["name"], f["feature_level"]),
    "BrokerRegistrationChangeRecord": lambda f: BrokerRegistrationChangeRecord(
        f["broker_id"], f["broker_epoch"], f["fenced"], f.get("in_controlled_shutdown", 0)
    ),
    "NoOpRecord": lambda f: NoOpRecord(),
    "BeginTransactionRecord": lambda f: BeginTransactionRecord(f["name"] or ""),
    "EndTransactionRecord": lambda f: EndTransactionRecord(),
    "AbortTransactionRecord": lambda f: AbortTransactionRecord(f["reason"] or ""),
    "LeaderChangeMessage": lambda f: LeaderChangeMessage(
        f["leader_id"],
        tuple(v["voter_id"] for v in f["voters"]),
        tuple(v["voter_id"] for v in f["granting_voters"]),
    ),
    "SnapshotHeaderRecord": lambda f: SnapshotHeader(f["last_contained_log_timestamp"]),
    "SnapshotFooterRecord": lambda f: SnapshotFooter(),
    "KRaftVersionRecord": lambda f: KRaftVersionRecord(f["kraft_version"]),
    "VotersRecord": _voters,
}

# The Kafka record names that have a native counterpart.
MODELLED = frozenset(_TO_NATIVE)
# The native fields (in the native record's field order) of the records a replay
# reads by the million, for readers that turn them into columns without building
# the record (spark_replay.decode_kafka); the same functions build the records.
NATIVE_FIELDS: dict[str, Any] = {
    "PartitionRecord": _partition_fields,
    "PartitionChangeRecord": _partition_change_fields,
}


# The fields of NATIVE_FIELDS' records in their native order, for the tuple
# decoders of native_values; a field a version does not have comes out None, and
# `_EMPTY_IF_NONE` says where the native record then holds an empty tuple.
_NATIVE_NAMES = {
    "PartitionRecord": (
        ["topic_id", "partition_id", "replicas", "isr", "removing_replicas", "adding_replicas",
         "leader", "leader_recovery_state", "leader_epoch", "partition_epoch",
         "eligible_leader_replicas", "last_known_elr"],
        (10, 11),
    ),
    "PartitionChangeRecord": (
        ["topic_id", "partition_id", "isr", "leader", "replicas", "removing_replicas",
         "adding_replicas", "leader_recovery_state", "eligible_leader_replicas", "last_known_elr"],
        (),
    ),
}  # fmt: skip
_HOT_API_KEYS = {
    key: schema["name"]
    for key, schema in METADATA_SCHEMAS.items()
    if schema["name"] in _NATIVE_NAMES
}
# (api key, version) -> (name, tuple decoder, positions to turn from None to ()), or None.
_TUPLE_READERS: dict[tuple[int, int], tuple[str, Any, tuple[int, ...]] | None] = {}


def native_values(value: bytes) -> tuple[str, tuple[Any, ...]] | None:
    """(Kafka name, NATIVE_FIELDS' tuple) of a PartitionRecord or PartitionChangeRecord
    value, decoded without the fields dict; None for any other value and for anything
    unusual (the caller then takes decode_value, which decodes it or names the
    problem). Equal to NATIVE_FIELDS[name](decode_value(...)[3]) (tested)."""
    if len(value) < 3 or value[0] != FRAME_VERSION or value[1] >= 0x80 or value[2] >= 0x80:
        return None
    key = (value[1], value[2])
    known = _TUPLE_READERS.get(key, False)
    if known is False:
        known = _TUPLE_READERS[key] = _tuple_reader(*key)
    if known is None:
        return None
    name, reader, empty = known
    try:
        values, end = reader(value, 3)
    except (IndexError, struct.error, ValueError):  # ValueError: MessageError, bad UTF-8
        return None
    if end != len(value):
        return None
    if empty:
        values = list(values)
        for i in empty:
            if values[i] is None:
                values[i] = ()
        values = tuple(values)
    return name, values


def _tuple_reader(api_key: int, version: int) -> tuple[str, Any, tuple[int, ...]] | None:
    name = _HOT_API_KEYS.get(api_key)
    if name is None:
        return None
    schema = METADATA_SCHEMAS[api_key]
    lo, hi = schema["versions"]
    if not lo <= version <= hi:
        return None
    names, empty = _NATIVE_NAMES[name]
    return name, compile_tuple(schema, version, names), empty


def to_native(
    name: str, api_key: int, version: int, fields: dict[str, Any]
) -> Record | UnmodelledKafkaRecord:
    """The native record a Kafka record means, or an UnmodelledKafkaRecord."""
    convert = _TO_NATIVE.get(name)
    if convert is None:
        return UnmodelledKafkaRecord(name, api_key, version, fields)
    return convert(fields)  # type: ignore[no-any-return]


def decode_record(
    key: bytes | None, value: bytes | None, offset: int, timestamp: int, control: bool
) -> KafkaRecord:
    name, api_key, version, fields = decode_value(key, value, offset, control)
    return KafkaRecord(
        offset,
        timestamp,
        control,
        name,
        api_key,
        version,
        fields,
        to_native(name, api_key, version, fields),
    )
