"""Metadata records of `__cluster_metadata` (KIP-631) and their msgpack codec.

Every record is a frozen dataclass. On the wire a record is one msgpack array
``[type_id, version, field0, field1, ...]`` in the order the fields are declared;
nested values (endpoints, features) are arrays too. Data records and control
records (LeaderChangeMessage, SnapshotHeader, SnapshotFooter) are two id spaces,
told apart by the batch's control flag, as in Kafka.

Decoding checks the type id, the version and every field's type, and raises
`RecordDecodeError` naming the offset: an unknown or newer record is never skipped.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import msgpack

from metadata_log.errors import RecordDecodeError

# Sentinels of PartitionChangeRecord, as in Kafka.
NO_LEADER = -1
NO_LEADER_CHANGE = -2
LEADER_RECOVERY_UNCHANGED = -1

# LeaderRecoveryState values (KIP-704).
RECOVERED = 0
RECOVERING = 1

# BrokerRegistrationChangeRecord.fenced values.
FENCE_UNCHANGED = 0
FENCE_YES = 1
FENCE_NO = -1

BROKER_RESOURCE = 4  # ConfigResource.Type.BROKER
TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC

METADATA_VERSION_FEATURE = "metadata.version"
# KIP-966's feature: at level 1 the controller keeps eligible leader replicas.
ELIGIBLE_LEADER_REPLICAS_FEATURE = "eligible.leader.replicas.version"
# The first metadata.version whose partition records carry the KIP-966 fields.
ELR_METADATA_VERSION = 2


def new_topic_id(rng: Any | None = None) -> str:
    """A topic id in Kafka's printed form: URL-safe base64 of 16 bytes, no padding."""
    raw = rng.randbytes(16) if rng is not None else uuid.uuid4().bytes
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"


@dataclass(frozen=True, slots=True)
class VoterEntry:
    """One voter of a VotersRecord (KIP-853): its key (id, directory id) and endpoint.

    `directory_id` is the random id written to meta.properties when the voter's
    data directory was formatted; "" means not known yet (a quorum bootstrapped
    from a static --voters list, before the leader learned it from a fetch).
    """

    voter_id: int
    directory_id: str
    url: str


@dataclass(frozen=True, slots=True)
class BrokerFeature:
    name: str
    min_supported_version: int
    max_supported_version: int


# --------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord:
    TYPE: ClassVar[int] = 0
    broker_id: int
    incarnation_id: str
    broker_epoch: int
    endpoints: tuple[Endpoint, ...] = ()
    features: tuple[BrokerFeature, ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False


@dataclass(frozen=True, slots=True)
class UnregisterBrokerRecord:
    TYPE: ClassVar[int] = 1
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class TopicRecord:
    TYPE: ClassVar[int] = 2
    name: str
    topic_id: str


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    TYPE: ClassVar[int] = 3
    topic_id: str
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader: int = NO_LEADER
    leader_recovery_state: int = RECOVERED
    leader_epoch: int = 0
    partition_epoch: int = 0
    # KIP-966 (version 1, metadata.version 2): replicas cut from an ISR below
    # min.insync.replicas that may still lead cleanly, and the last known leader.
    eligible_leader_replicas: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    TYPE: ClassVar[int] = 4
    resource_type: int
    resource_name: str
    name: str
    value: str | None  # None deletes the key


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    """Only what changed: None / -2 / -1 sentinels mean 'unchanged'."""

    TYPE: ClassVar[int] = 5
    topic_id: str
    partition_id: int
    isr: tuple[int, ...] | None = None
    leader: int = NO_LEADER_CHANGE
    replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    leader_recovery_state: int = LEADER_RECOVERY_UNCHANGED
    # KIP-966 (version 1, metadata.version 2); None: unchanged
    eligible_leader_replicas: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class FenceBrokerRecord:
    TYPE: ClassVar[int] = 7
    id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class UnfenceBrokerRecord:
    TYPE: ClassVar[int] = 8
    id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    TYPE: ClassVar[int] = 9
    topic_id: str


@dataclass(frozen=True, slots=True)
class FeatureLevelRecord:
    TYPE: ClassVar[int] = 12
    name: str
    feature_level: int


@dataclass(frozen=True, slots=True)
class BrokerRegistrationChangeRecord:
    TYPE: ClassVar[int] = 17
    broker_id: int
    broker_epoch: int
    fenced: int = FENCE_UNCHANGED  # 1 fenced, -1 unfenced, 0 unchanged
    in_controlled_shutdown: int = 0  # 1 entered controlled shutdown, 0 unchanged


@dataclass(frozen=True, slots=True)
class NoOpRecord:
    TYPE: ClassVar[int] = 20


@dataclass(frozen=True, slots=True)
class BeginTransactionRecord:
    TYPE: ClassVar[int] = 23
    name: str = ""


@dataclass(frozen=True, slots=True)
class EndTransactionRecord:
    TYPE: ClassVar[int] = 24


@dataclass(frozen=True, slots=True)
class AbortTransactionRecord:
    TYPE: ClassVar[int] = 25
    reason: str = ""


# ------------------------------------------------------------------ control records


@dataclass(frozen=True, slots=True)
class LeaderChangeMessage:
    TYPE: ClassVar[int] = 2
    leader_id: int
    voters: tuple[int, ...] = ()
    granting_voters: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class SnapshotHeader:
    TYPE: ClassVar[int] = 3
    last_contained_log_time: int = 0


@dataclass(frozen=True, slots=True)
class SnapshotFooter:
    TYPE: ClassVar[int] = 4


@dataclass(frozen=True, slots=True)
class KRaftVersionRecord:
    """The kraft.version in force (KIP-853): 1 means the voter set lives in the log."""

    TYPE: ClassVar[int] = 5
    kraft_version: int = 1


@dataclass(frozen=True, slots=True)
class VotersRecord:
    """The whole voter set (KIP-853), written at bootstrap and on every change.

    Each node uses the newest one in its log as soon as it is appended (not
    when it commits) and falls back to the previous one if it is truncated.
    """

    TYPE: ClassVar[int] = 6
    voters: tuple[VoterEntry, ...] = ()


MetadataRecord = (
    RegisterBrokerRecord
    | UnregisterBrokerRecord
    | TopicRecord
    | PartitionRecord
    | ConfigRecord
    | PartitionChangeRecord
    | FenceBrokerRecord
    | UnfenceBrokerRecord
    | RemoveTopicRecord
    | FeatureLevelRecord
    | BrokerRegistrationChangeRecord
    | NoOpRecord
    | BeginTransactionRecord
    | EndTransactionRecord
    | AbortTransactionRecord
)
ControlRecord = (
    LeaderChangeMessage | SnapshotHeader | SnapshotFooter | KRaftVersionRecord | VotersRecord
)
Record = MetadataRecord | ControlRecord

DATA_RECORD_TYPES: tuple[type, ...] = (
    RegisterBrokerRecord,
    UnregisterBrokerRecord,
    TopicRecord,
    PartitionRecord,
    ConfigRecord,
    PartitionChangeRecord,
    FenceBrokerRecord,
    UnfenceBrokerRecord,
    RemoveTopicRecord,
    FeatureLevelRecord,
    BrokerRegistrationChangeRecord,
    NoOpRecord,
    BeginTransactionRecord,
    EndTransactionRecord,
    AbortTransactionRecord,
)
CONTROL_RECORD_TYPES: tuple[type, ...] = (
    LeaderChangeMessage,
    SnapshotHeader,
    SnapshotFooter,
    KRaftVersionRecord,
    VotersRecord,
)

ALL_RECORD_TYPES: tuple[type, ...] = DATA_RECORD_TYPES + CONTROL_RECORD_TYPES

# ------------------------------------------------------------- record versions
#
# A record's version says which of its fields are on the wire: version v carries
# the first FIELD_COUNTS[cls][v] fields of the dataclass (a later version only
# adds fields at the end, and a reader fills the missing ones with their
# defaults). The cluster's metadata.version feature level decides the highest
# version of each record a writer may use (RECORD_VERSIONS), so that a rolling
# upgrade never makes an old node read a record version it does not know: the
# active controller writes at the level in its image and the level is raised
# only once every node supports it. Bumping a record means: add its fields at
# the end of the dataclass, a FIELD_COUNTS entry for the new version, and a new
# metadata.version level in RECORD_VERSIONS that allows it.

# cls -> version -> number of leading fields that version carries.
FIELD_COUNTS: dict[type, dict[int, int]] = {cls: {0: len(fields(cls))} for cls in ALL_RECORD_TYPES}
# Version 1 of the partition records adds KIP-966's two fields at the end.
FIELD_COUNTS[PartitionRecord] = {0: 10, 1: 12}
FIELD_COUNTS[PartitionChangeRecord] = {0: 8, 1: 10}
# metadata.version level -> cls -> highest version a writer at that level may use.
RECORD_VERSIONS: dict[int, dict[type, int]] = {
    1: {cls: 0 for cls in ALL_RECORD_TYPES},
    ELR_METADATA_VERSION: {
        **{cls: 0 for cls in ALL_RECORD_TYPES},
        PartitionRecord: 1,
        PartitionChangeRecord: 1,
    },
}
MIN_METADATA_VERSION = min(RECORD_VERSIONS)
# Highest metadata.version this code understands (what a fresh cluster bootstraps at).
LATEST_METADATA_VERSION = max(RECORD_VERSIONS)

# Highest version of each record this code reads and writes.
SUPPORTED_VERSION: dict[type, int] = {cls: max(FIELD_COUNTS[cls]) for cls in ALL_RECORD_TYPES}


class UnsupportedMetadataVersionError(ValueError):
    """A metadata.version level this code cannot write records for."""


def record_version(cls: type, metadata_version: int) -> int:
    """The highest version of record class `cls` a writer at `metadata_version` may use."""
    levels = RECORD_VERSIONS.get(metadata_version)
    if levels is None:
        raise UnsupportedMetadataVersionError(
            f"metadata.version {metadata_version} is not supported: this node writes levels "
            f"{MIN_METADATA_VERSION}..{LATEST_METADATA_VERSION}"
        )
    return levels[cls]


# ----------------------------------------------------------------------------- codec

_Check = Callable[[Any], bool]


def _is_int(v: Any) -> bool:
    return type(v) is int


def _is_bool(v: Any) -> bool:
    return type(v) is bool


def _is_str(v: Any) -> bool:
    return type(v) is str


def _is_opt_str(v: Any) -> bool:
    return v is None or type(v) is str


def _is_int_tuple(v: Any) -> bool:
    return type(v) is tuple and all(type(x) is int for x in v)


def _is_opt_int_tuple(v: Any) -> bool:
    return v is None or _is_int_tuple(v)


_CHECKS: dict[str, _Check] = {
    "int": _is_int,
    "bool": _is_bool,
    "str": _is_str,
    "str | None": _is_opt_str,
    "tuple[int, ...]": _is_int_tuple,
    "tuple[int, ...] | None": _is_opt_int_tuple,
}


_new = object.__new__
_set_ep = tuple(Endpoint.__dict__[n].__set__ for n in ("name", "host", "port", "security_protocol"))
_set_ft = tuple(
    BrokerFeature.__dict__[n].__set__
    for n in ("name", "min_supported_version", "max_supported_version")
)


def _endpoint_from_wire(v: Any) -> Endpoint:
    # Built like the generated record decoders (slots set directly, no frozen
    # __init__): RegisterBrokerRecords are a fifth of a busy log.
    name, host, port, proto = v
    if type(name) is not str or type(host) is not str or type(port) is not int:
        raise ValueError("endpoint fields must be [name, host, port, security_protocol]")
    if type(proto) is not str:
        raise ValueError("endpoint fields must be [name, host, port, security_protocol]")
    e = _new(Endpoint)
    s_name, s_host, s_port, s_proto = _set_ep
    s_name(e, name)
    s_host(e, host)
    s_port(e, port)
    s_proto(e, proto)
    return e  # type: ignore[no-any-return]


def _voter_from_wire(v: Any) -> VoterEntry:
    voter_id, directory_id, url = v
    if not (_is_int(voter_id) and _is_str(directory_id) and _is_str(url)):
        raise ValueError("voter fields must be [voter_id, directory_id, url]")
    return VoterEntry(voter_id, directory_id, url)


def _feature_from_wire(v: Any) -> BrokerFeature:
    name, lo, hi = v
    if type(name) is not str or type(lo) is not int or type(hi) is not int:
        raise ValueError("feature fields must be [name, min, max]")
    f = _new(BrokerFeature)
    s_name, s_lo, s_hi = _set_ft
    s_name(f, name)
    s_lo(f, lo)
    s_hi(f, hi)
    return f  # type: ignore[no-any-return]


class _Codec:
    """Per-class field list, wire conversion and validation, built once."""

    __slots__ = ("cls", "names", "defaults", "checks", "nested", "min_fields", "decode")

    def __init__(self, cls: type) -> None:
        self.cls = cls
        fs = fields(cls)
        self.names = tuple(f.name for f in fs)
        self.defaults = tuple((f.name, f.default) for f in fs)
        self.min_fields = sum(
            1
            for f in fs
            if f.default is f.default_factory  # both MISSING: required
        )
        self.checks: list[tuple[int, _Check]] = []
        self.nested: dict[int, Callable[[Any], Any]] = {}
        for i, f in enumerate(fs):
            ann = f.type if isinstance(f.type, str) else str(f.type)
            if ann == "tuple[Endpoint, ...]":
                self.nested[i] = _endpoint_from_wire
            elif ann == "tuple[BrokerFeature, ...]":
                self.nested[i] = _feature_from_wire
            elif ann == "tuple[VoterEntry, ...]":
                self.nested[i] = _voter_from_wire
            else:
                self.checks.append((i, _CHECKS[ann]))
        self.decode: Callable[[tuple[Any, ...]], Any] = _compile_decoder(self)

    def to_wire(self, rec: Any, version: int) -> list[Any]:
        """``[type, version, *fields]`` with exactly the fields `version` carries.

        A field the version does not carry must hold its default: writing the
        record at that version would otherwise silently lose it.
        """
        n = FIELD_COUNTS[self.cls][version]
        out: list[Any] = [rec.TYPE, version]
        for i, name in enumerate(self.names[:n]):
            v = getattr(rec, name)
            if i in self.nested:
                v = [list(_nested_to_wire(x)) for x in v]
            out.append(v)
        for name, default in self.defaults[n:]:
            if getattr(rec, name) != default:
                raise ValueError(
                    f"{self.cls.__name__} version {version} has no field {name}: "
                    f"cannot write {getattr(rec, name)!r}"
                )
        return out

    def from_wire(self, values: tuple[Any, ...]) -> Any:
        """Validate and build the record from its wire fields (type and version stripped)."""
        return self.decode((None, None, *values))


# Checks of the generated decoders, by annotation: Python source over the value `{v}`.
# They are the same tests as _CHECKS, inlined because this is the hot path of reading.
_CHECK_SRC: dict[str, str] = {
    "int": "type({v}) is not int",
    "bool": "type({v}) is not bool",
    "str": "type({v}) is not str",
    "str | None": "{v} is not None and type({v}) is not str",
    "tuple[int, ...]": "type({v}) is not tuple or not _all_ints({v})",
    "tuple[int, ...] | None": "{v} is not None and (type({v}) is not tuple or not _all_ints({v}))",
}


def _all_ints(v: tuple[Any, ...]) -> bool:
    # A plain loop: measurably faster than all() over a generator for short tuples.
    for x in v:  # noqa: SIM110
        if type(x) is not int:
            return False
    return True


def _compile_decoder(codec: _Codec) -> Callable[[tuple[Any, ...]], Any]:
    """Generate a decoder of one record class: ``[type, version, *fields] -> record``.

    Reading the log decodes hundreds of thousands of records per second, so each
    class gets straight-line code: arity check, nested conversions, then every
    field's type check in declaration order (the same checks and messages as
    `_CHECKS`), then construction. Construction sets the slots directly instead
    of going through the frozen dataclass's __init__ (which pays
    object.__setattr__ per field); that is equivalent because the values are
    already validated and no record class defines __post_init__.
    """
    cls = codec.cls
    if hasattr(cls, "__post_init__"):  # pragma: no cover - guard for future records
        raise TypeError(f"{cls.__name__} defines __post_init__: cannot bypass __init__")
    fs = fields(cls)
    k = len(fs)
    env: dict[str, Any] = {
        "_new": object.__new__,
        "_cls": cls,
        "_all_ints": _all_ints,
        "_ValueError": ValueError,
    }
    # Missing trailing fields take their defaults, exactly as cls(*values) would.
    pad: list[Any] = [None] * k
    for i, f in enumerate(fs):
        if i >= codec.min_fields:
            pad[i] = f.default
    env["_pad"] = tuple(pad)
    arity_msg = f"{cls.__name__} has {k} fields, record carries {{n}}"
    lines = [
        "def decode(obj):",
        "    n = len(obj) - 2",
        f"    if n != {k}:",
        f"        if n < {codec.min_fields} or n > {k}:",
        f"            raise _ValueError(f{arity_msg!r})",
        "        obj = obj + _pad[n:]",
    ]
    names = [f"v{i}" for i in range(k)]
    if k:
        lines.append(f"    {', '.join(['_t', '_v', *names])}, = obj")
    for i, conv in codec.nested.items():
        env[f"_conv{i}"] = conv
        lines += [
            f"    if type(v{i}) is not tuple:",
            f"        raise _ValueError({'field ' + codec.names[i] + ' must be an array'!r})",
            f"    v{i} = tuple([_conv{i}(x) for x in v{i}])",
        ]
    for i, f in enumerate(fs):
        if i in codec.nested:
            continue
        ann = f.type if isinstance(f.type, str) else str(f.type)
        lines += [
            f"    if {_CHECK_SRC[ann].format(v=f'v{i}')}:",
            f"        raise _ValueError(f'field {f.name} has a bad value {{v{i}!r}}')",
        ]
    lines.append("    r = _new(_cls)")
    for i, f in enumerate(fs):
        env[f"_set{i}"] = cls.__dict__[f.name].__set__
        lines.append(f"    _set{i}(r, v{i})")
    lines.append("    return r")
    source = "\n".join(lines)
    exec(source, env)  # noqa: S102 - generated from dataclass fields only
    decode = env["decode"]
    decode.__source__ = source  # for debugging: the generated code
    return decode  # type: ignore[no-any-return]


def slot_constructor(cls: type) -> Callable[..., Any]:
    """`cls(*every field, positional)` for a frozen, slotted dataclass without
    __post_init__, setting the slots directly: the frozen __init__ pays
    object.__setattr__ per field, twice the cost (1.3 us a PartitionRegistration;
    a fence of a broker in a million ISRs builds a million records and merges a
    million registrations). The decoders (_compile_decoder) are built alike."""
    if hasattr(cls, "__post_init__"):  # pragma: no cover - guard for future fields
        raise TypeError(f"{cls.__name__} defines __post_init__")
    names = [f.name for f in fields(cls)]
    env: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    args = ", ".join(f"a{i}" for i in range(len(names)))
    lines = [f"def make({args}):", "    r = _new(_cls)"]
    for i, name in enumerate(names):
        env[f"_s{i}"] = cls.__dict__[name].__set__
        lines.append(f"    _s{i}(r, a{i})")
    lines.append("    return r")
    exec("\n".join(lines), env)  # noqa: S102 - generated from dataclass fields only
    return env["make"]


def _nested_to_wire(x: Endpoint | BrokerFeature | VoterEntry) -> tuple[Any, ...]:
    if isinstance(x, Endpoint):
        return (x.name, x.host, x.port, x.security_protocol)
    if isinstance(x, VoterEntry):
        return (x.voter_id, x.directory_id, x.url)
    return (x.name, x.min_supported_version, x.max_supported_version)


_DATA_CODECS: dict[int, _Codec] = {cls.TYPE: _Codec(cls) for cls in DATA_RECORD_TYPES}
_CONTROL_CODECS: dict[int, _Codec] = {cls.TYPE: _Codec(cls) for cls in CONTROL_RECORD_TYPES}
_CODEC_BY_CLASS: dict[type, _Codec] = {
    c.cls: c for c in (*_DATA_CODECS.values(), *_CONTROL_CODECS.values())
}


def refresh_codec_tables() -> None:
    """Recompute what is derived from SUPPORTED_VERSION / FIELD_COUNTS (tests patch them)."""
    _FAST[False] = _fast_paths(_DATA_CODECS)
    _FAST[True] = _fast_paths(_CONTROL_CODECS)


# (type id, version, array length) -> decoder of the latest version, per id space.
_FAST: dict[bool, dict[tuple[int, int, int], Any]] = {}

_packb = msgpack.Packer(use_bin_type=True).pack


def is_control(rec: Record) -> bool:
    return type(rec) in _CONTROL_TYPE_SET


_CONTROL_TYPE_SET = frozenset(CONTROL_RECORD_TYPES)


def encode_record(
    rec: Record, version: int | None = None, *, metadata_version: int | None = None
) -> bytes:
    """msgpack bytes of one record: ``[type_id, version, *fields]``.

    The version is `version` if given, else the highest one `metadata_version`
    allows (`record_version`), else the highest this code supports.
    """
    codec = _CODEC_BY_CLASS.get(type(rec))
    if codec is None:
        raise TypeError(f"not a metadata record: {type(rec).__name__}")
    supported = SUPPORTED_VERSION[type(rec)]
    if version is not None:
        v = version
        if metadata_version is not None and v > record_version(type(rec), metadata_version):
            raise UnsupportedMetadataVersionError(
                f"{type(rec).__name__} version {v} needs a higher metadata.version "
                f"than {metadata_version}"
            )
    elif metadata_version is not None:
        v = record_version(type(rec), metadata_version)
    else:
        v = supported
    if not 0 <= v <= supported:
        raise ValueError(f"{type(rec).__name__} version {v} is not supported (max {supported})")
    return _packb(codec.to_wire(rec, v))


def _fast_paths(codecs: dict[int, _Codec]) -> dict[tuple[int, int, int], Any]:
    """(type id, version, array length) -> decoder, for the latest version of each record.

    A record of that exact shape needs no version or arity check beyond the key.
    Rebuilt by `refresh_codec_tables` whenever the version tables change.
    """
    return {
        (tid, SUPPORTED_VERSION[c.cls], 2 + FIELD_COUNTS[c.cls][SUPPORTED_VERSION[c.cls]]): c.decode
        for tid, c in codecs.items()
    }


def records_from_wire(objs: Iterable[Any], base_offset: int, control: bool = False) -> list[Record]:
    """Build the records of a batch from its unpacked msgpack arrays (offsets from base_offset).

    The hot path of reading the log: a record of its class's latest shape is
    decoded straight away; anything else goes through `record_from_wire`, which
    checks everything and raises the error naming the offset.
    """
    fast = _FAST[bool(control)]
    get = fast.get
    out: list[Record] = []
    append = out.append
    offset = base_offset
    for obj in objs:
        # type(...) is int keeps True/1.0 (equal and equally hashed) off the fast path.
        if type(obj) is tuple and len(obj) >= 2 and type(obj[0]) is int and type(obj[1]) is int:
            decode = get((obj[0], obj[1], len(obj)))
            if decode is not None:
                try:
                    append(decode(obj))
                except (ValueError, TypeError):
                    record_from_wire(obj, offset, control)  # raises the named error
                    raise  # pragma: no cover - record_from_wire always raises here
                offset += 1
                continue
        append(record_from_wire(obj, offset, control))
        offset += 1
    return out


def record_from_wire(obj: Any, offset: int, control: bool = False) -> Record:
    """Build a record from an unpacked msgpack array; errors name `offset`."""
    if type(obj) is not tuple or len(obj) < 2:
        raise RecordDecodeError(offset, "record is not an array [type, version, ...]")
    type_id, version = obj[0], obj[1]
    kind = "control record" if control else "record"
    codec = (
        (_CONTROL_CODECS if control else _DATA_CODECS).get(type_id) if _is_int(type_id) else None
    )
    if codec is None:
        raise RecordDecodeError(offset, f"unknown {kind} type {type_id!r}")
    supported = SUPPORTED_VERSION[codec.cls]
    if type(version) is not int or not 0 <= version <= supported:
        raise RecordDecodeError(
            offset,
            f"{codec.cls.__name__} version {version!r} is newer than supported ({supported})",
        )
    arity = FIELD_COUNTS[codec.cls][version]
    if len(obj) - 2 != arity:
        # Each version carries exactly its own fields (older ones fewer: the
        # decoder fills the rest with their defaults).
        raise RecordDecodeError(
            offset,
            f"malformed {codec.cls.__name__}: version {version} has "
            f"{arity} fields, record carries {len(obj) - 2}",
        )
    try:
        return codec.decode(obj)
    except (ValueError, TypeError) as e:
        raise RecordDecodeError(offset, f"malformed {codec.cls.__name__}: {e}") from None


def decode_record(data: bytes, offset: int, control: bool = False) -> Record:
    """Decode one record's msgpack bytes; errors name `offset`."""
    try:
        obj = msgpack.unpackb(data, use_list=False, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several types for garbage input
        raise RecordDecodeError(offset, f"not valid msgpack: {e}") from None
    return record_from_wire(obj, offset, control)


def record_type_name(rec: Record) -> str:
    return type(rec).__name__


def record_fields(rec: Record) -> dict[str, Any]:
    """The record's fields as plain JSON-able values (snake_case names)."""
    codec = _CODEC_BY_CLASS[type(rec)]
    out: dict[str, Any] = {}
    for i, name in enumerate(codec.names):
        v = getattr(rec, name)
        if i in codec.nested:
            v = [
                {f.name: getattr(x, f.name) for f in fields(x)}  # type: ignore[arg-type]
                for x in v
            ]
        elif type(v) is tuple:
            v = list(v)
        out[name] = v
    return out


def record_class(name: str) -> type:
    for cls in DATA_RECORD_TYPES + CONTROL_RECORD_TYPES:
        if cls.__name__ == name:
            return cls
    raise KeyError(name)


def encode_records(records: Iterable[Record]) -> list[bytes]:
    return [encode_record(r) for r in records]


refresh_codec_tables()
