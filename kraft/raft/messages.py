"""The Raft RPCs of KIP-595 (plus KIP-996's pre-vote flag) as frozen dataclasses.

Every request carries the cluster id. Field names follow Kafka's request schemas
in snake_case. Each message has a msgpack-able dict form, ``to_wire()`` /
``message_from_wire()``, which the HTTP shell sends as the body of
``POST /raft/<endpoint>``: the dict holds only primitives (ints, bools, str,
bytes, lists, None) and a ``"type"`` key naming the message.

Responses carry the responder's view of the leader (``leader_id``,
``leader_epoch``) so that any node can learn a newer epoch from any answer, as in
Kafka's ``maybeHandleCommonResponse``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from metadata_log.snapshot import SnapshotId

# Kafka's error names (the subset the Raft RPCs use).
NONE = "NONE"
FENCED_LEADER_EPOCH = "FENCED_LEADER_EPOCH"
NOT_LEADER_OR_FOLLOWER = "NOT_LEADER_OR_FOLLOWER"
INCONSISTENT_CLUSTER_ID = "INCONSISTENT_CLUSTER_ID"
UNKNOWN_LEADER_EPOCH = "UNKNOWN_LEADER_EPOCH"
OFFSET_OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"
POSITION_OUT_OF_RANGE = "POSITION_OUT_OF_RANGE"
SNAPSHOT_NOT_FOUND = "SNAPSHOT_NOT_FOUND"
INCONSISTENT_VOTER_SET = "INCONSISTENT_VOTER_SET"
INVALID_REQUEST = "INVALID_REQUEST"
# KIP-853: the request names a voter key (id, directory id) the receiver is not.
INVALID_VOTER_KEY = "INVALID_VOTER_KEY"

ERRORS = frozenset(
    {
        NONE,
        FENCED_LEADER_EPOCH,
        NOT_LEADER_OR_FOLLOWER,
        INCONSISTENT_CLUSTER_ID,
        UNKNOWN_LEADER_EPOCH,
        OFFSET_OUT_OF_RANGE,
        POSITION_OUT_OF_RANGE,
        SNAPSHOT_NOT_FOUND,
        INCONSISTENT_VOTER_SET,
        INVALID_REQUEST,
        INVALID_VOTER_KEY,
    }
)

NO_LEADER = -1  # leader_id when unknown, as Kafka's -1


@dataclass(frozen=True, slots=True)
class DivergingEpoch:
    """Where the leader's log stops agreeing with the fetcher's: truncate to end_offset."""

    epoch: int
    end_offset: int


# --------------------------------------------------------------------------- Vote


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """A candidate (or, with pre_vote, a prospective) asks for a vote in `candidate_epoch`."""

    ENDPOINT: ClassVar[str] = "vote"
    cluster_id: str
    candidate_id: int
    candidate_epoch: int
    last_offset_epoch: int  # epoch of the candidate's last batch
    last_offset: int  # the candidate's log end offset
    pre_vote: bool = False
    # KIP-853: the directory id the candidate holds for the receiving voter ("":
    # not known); a receiver with another directory id is not that voter.
    voter_directory_id: str = ""


@dataclass(frozen=True, slots=True)
class VoteResponse:
    ENDPOINT: ClassVar[str] = "vote"
    error: str
    vote_granted: bool
    leader_id: int  # the voter's known leader of leader_epoch, or -1
    leader_epoch: int  # the voter's current epoch
    pre_vote: bool = False


# ---------------------------------------------------------------- BeginQuorumEpoch


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    """A new leader tells the voters it won `leader_epoch` (sent until acknowledged)."""

    ENDPOINT: ClassVar[str] = "begin-quorum-epoch"
    cluster_id: str
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    ENDPOINT: ClassVar[str] = "begin-quorum-epoch"
    error: str
    leader_id: int
    leader_epoch: int


# ------------------------------------------------------------------ EndQuorumEpoch


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    """A resigning leader hands over: successors ordered by how far they have fetched."""

    ENDPOINT: ClassVar[str] = "end-quorum-epoch"
    cluster_id: str
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    ENDPOINT: ClassVar[str] = "end-quorum-epoch"
    error: str
    leader_id: int
    leader_epoch: int


# --------------------------------------------------------------------------- Fetch


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A follower or observer pulls from `fetch_offset` (a long poll of up to max_wait_ms).

    `replica_epoch` is the fetcher's current leader epoch (Kafka's
    current_leader_epoch): the leader fences a lower one and answers
    UNKNOWN_LEADER_EPOCH to a higher one. `fetch_offset` is the fetcher's log end
    offset, which it only reports once that much is flushed. `high_watermark` is
    the fetcher's own (-1: not sent): the leader answers at once, rather than
    parking the fetch, when the fetcher's is behind (as KIP-1166 adds to Kafka).
    """

    ENDPOINT: ClassVar[str] = "fetch"
    cluster_id: str
    replica_id: int
    replica_is_voter: bool
    replica_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_wait_ms: int = 500
    max_bytes: int = 1 << 20
    high_watermark: int = -1
    # KIP-853: the fetcher's directory id; with replica_id its voter key.
    replica_directory_id: str = ""


@dataclass(frozen=True, slots=True)
class FetchResponse:
    ENDPOINT: ClassVar[str] = "fetch"
    error: str
    leader_id: int
    leader_epoch: int
    high_watermark: int = -1
    log_start_offset: int = 0
    records: bytes = b""
    diverging_epoch: DivergingEpoch | None = None
    snapshot_id: SnapshotId | None = None
    # The leader's URL when the responder knows it (Kafka's NodeEndpoints), so
    # that a node bootstrapped from --bootstrap-controllers can reach it.
    leader_endpoint: str = ""


# ------------------------------------------------------------------- FetchSnapshot


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    ENDPOINT: ClassVar[str] = "fetch-snapshot"
    cluster_id: str
    replica_id: int
    replica_epoch: int
    snapshot_id: SnapshotId
    position: int
    max_bytes: int = 1 << 20
    # As a Fetch's (KIP-853's FetchSnapshot v1 carries the voter key): a voter
    # downloading a snapshot is fetching, for check-quorum and for voter removals.
    replica_is_voter: bool = False
    replica_directory_id: str = ""


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    ENDPOINT: ClassVar[str] = "fetch-snapshot"
    error: str
    leader_id: int
    leader_epoch: int
    snapshot_id: SnapshotId | None = None
    position: int = 0
    chunk: bytes = b""
    size: int = 0  # the snapshot's total size in bytes


RaftRequest = (
    VoteRequest
    | BeginQuorumEpochRequest
    | EndQuorumEpochRequest
    | FetchRequest
    | FetchSnapshotRequest
)
RaftResponse = (
    VoteResponse
    | BeginQuorumEpochResponse
    | EndQuorumEpochResponse
    | FetchResponse
    | FetchSnapshotResponse
)
RaftMessage = RaftRequest | RaftResponse

REQUEST_TYPES: tuple[type, ...] = (
    VoteRequest,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
)
RESPONSE_TYPES: tuple[type, ...] = (
    VoteResponse,
    BeginQuorumEpochResponse,
    EndQuorumEpochResponse,
    FetchResponse,
    FetchSnapshotResponse,
)
_BY_NAME: dict[str, type] = {cls.__name__: cls for cls in REQUEST_TYPES + RESPONSE_TYPES}
# Field names per class, computed once (to_wire is on the replication hot path).
_FIELDS: dict[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in fields(cls)) for cls in REQUEST_TYPES + RESPONSE_TYPES
}


def is_request(msg: object) -> bool:
    return isinstance(msg, REQUEST_TYPES)


def _value_to_wire(v: Any) -> Any:
    if isinstance(v, SnapshotId):
        return [v.end_offset, v.epoch]
    if isinstance(v, DivergingEpoch):
        return [v.epoch, v.end_offset]
    if isinstance(v, tuple):
        return list(v)
    return v


def to_wire(msg: RaftMessage) -> dict[str, Any]:
    """The msgpack-able dict form of a message (``"type"`` names the class)."""
    cls = type(msg)
    out: dict[str, Any] = {"type": cls.__name__}
    for name in _FIELDS[cls]:
        out[name] = _value_to_wire(getattr(msg, name))
    return out


class WireFormatError(ValueError):
    """A body that is not a well-formed Raft message (the shell answers 400)."""


def _pair(v: Any, what: str) -> tuple[int, int]:
    if not (
        isinstance(v, list | tuple)
        and len(v) == 2
        and all(type(x) is int and -1 <= x <= _INT64_MAX for x in v)
    ):
        raise WireFormatError(f"{what} must be a pair of integers, got {v!r}")
    return v[0], v[1]


_INT_FIELDS = {
    "candidate_id",
    "candidate_epoch",
    "last_offset_epoch",
    "last_offset",
    "leader_id",
    "leader_epoch",
    "replica_id",
    "replica_epoch",
    "fetch_offset",
    "last_fetched_epoch",
    "max_wait_ms",
    "max_bytes",
    "high_watermark",
    "log_start_offset",
    "position",
    "size",
}
# Ranges on the wire (Kafka's int32 epochs and ids, int64 offsets). An epoch must
# leave room for the next election: a Vote claiming epoch 2**31 - 1 would make the
# receiver a candidate at 2**31, which no batch header can hold (a hostile request
# must not be able to stop a node). -1 is "none / not sent" everywhere.
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_EPOCH_FIELDS = {
    "candidate_epoch",
    "last_offset_epoch",
    "leader_epoch",
    "replica_epoch",
    "last_fetched_epoch",
}
_NONNEG_INT32_FIELDS = {"max_wait_ms", "max_bytes"}
_INT32_FIELDS = {"candidate_id", "leader_id", "replica_id"}


def _int_range(name: str) -> tuple[int, int]:
    if name in _EPOCH_FIELDS:
        return -1, _INT32_MAX - 1
    if name in _NONNEG_INT32_FIELDS:
        return 0, _INT32_MAX
    if name in _INT32_FIELDS:
        return -1, _INT32_MAX
    return -1, _INT64_MAX  # offsets, positions, sizes


_BOOL_FIELDS = {"pre_vote", "vote_granted", "replica_is_voter"}
_BYTES_FIELDS = {"records", "chunk"}
_STR_FIELDS = frozenset(
    {"cluster_id", "error", "voter_directory_id", "replica_directory_id", "leader_endpoint"}
)


def message_from_wire(obj: Any) -> RaftMessage:
    """Validate and rebuild a message from its dict form; WireFormatError if malformed."""
    if not isinstance(obj, dict):
        raise WireFormatError("a Raft message must be a map")
    kind = obj.get("type")
    cls = _BY_NAME.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise WireFormatError(f"unknown Raft message type {kind!r}")
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in obj:
            if f.default is f.default_factory:  # both MISSING: required
                raise WireFormatError(f"{cls.__name__}: missing field {f.name!r}")
            continue
        v = obj[f.name]
        name = f.name
        if name in _INT_FIELDS:
            if type(v) is not int:
                raise WireFormatError(f"{cls.__name__}.{name} must be an integer")
            lo, hi = _int_range(name)
            if not lo <= v <= hi:
                raise WireFormatError(f"{cls.__name__}.{name} must be in {lo}..{hi}, got {v}")
        elif name in _BOOL_FIELDS:
            if type(v) is not bool:
                raise WireFormatError(f"{cls.__name__}.{name} must be a boolean")
        elif name in _BYTES_FIELDS:
            if not isinstance(v, bytes | bytearray):
                raise WireFormatError(f"{cls.__name__}.{name} must be bytes")
            v = bytes(v)
        elif name in _STR_FIELDS:
            if type(v) is not str:
                raise WireFormatError(f"{cls.__name__}.{name} must be a string")
            if name == "error" and v not in ERRORS:
                raise WireFormatError(f"{cls.__name__}: unknown error {v!r}")
        elif name == "preferred_successors":
            if not isinstance(v, list | tuple) or not all(
                type(x) is int and 0 <= x <= _INT32_MAX for x in v
            ):
                raise WireFormatError("preferred_successors must be a list of node ids")
            v = tuple(v)
        elif name == "snapshot_id":
            if v is not None:
                end, epoch = _pair(v, "snapshot_id")
                try:
                    v = SnapshotId(end, epoch)
                except ValueError as e:
                    raise WireFormatError(str(e)) from None
        elif name == "diverging_epoch" and v is not None:
            epoch, end = _pair(v, "diverging_epoch")
            v = DivergingEpoch(epoch, end)
        kwargs[name] = v
    if cls is FetchSnapshotRequest and kwargs.get("snapshot_id") is None:
        raise WireFormatError("FetchSnapshotRequest.snapshot_id is required")
    return cls(**kwargs)


def error_response(request: RaftRequest, error: str, epoch: int) -> RaftResponse:
    """The response to `request` carrying only `error` and this node's epoch (no
    leader named), e.g. INCONSISTENT_CLUSTER_ID to a request from another cluster."""
    match request:
        case VoteRequest():
            return VoteResponse(error, False, NO_LEADER, epoch, request.pre_vote)
        case BeginQuorumEpochRequest():
            return BeginQuorumEpochResponse(error, NO_LEADER, epoch)
        case EndQuorumEpochRequest():
            return EndQuorumEpochResponse(error, NO_LEADER, epoch)
        case FetchRequest():
            return FetchResponse(error, NO_LEADER, epoch)
    return FetchSnapshotResponse(error, NO_LEADER, epoch)
