"""The wire codec of the Raft RPCs: round trips and rejection of malformed bodies."""

from __future__ import annotations

import msgpack
import pytest

from kraft.raft.messages import (
    NONE,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DivergingEpoch,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
    WireFormatError,
    is_request,
    message_from_wire,
    to_wire,
)
from metadata_log.snapshot import SnapshotId

MESSAGES = [
    VoteRequest("c", 1, 3, 2, 10, pre_vote=True),
    VoteResponse(NONE, True, -1, 3, True),
    BeginQuorumEpochRequest("c", 1, 3),
    BeginQuorumEpochResponse(NONE, 1, 3),
    EndQuorumEpochRequest("c", 1, 3, (2, 3)),
    EndQuorumEpochResponse(NONE, 1, 3),
    FetchRequest("c", 2, True, 3, 10, 2, 500, 1024, 7),
    FetchResponse(NONE, 1, 3, 9, 0, b"\x00\x01", DivergingEpoch(2, 8), None),
    FetchResponse(NONE, 1, 3, 9, 4, b"", None, SnapshotId(4, 2)),
    FetchSnapshotRequest("c", 2, 3, SnapshotId(4, 2), 128, 64),
    FetchSnapshotResponse(NONE, 1, 3, SnapshotId(4, 2), 128, b"abc", 300),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip_through_msgpack(msg):
    wire = msgpack.unpackb(msgpack.packb(to_wire(msg)))
    assert message_from_wire(wire) == msg
    assert is_request(msg) == type(msg).__name__.endswith("Request")


def test_optional_fields_may_be_left_out():
    # An older sender without FetchRequest.high_watermark.
    wire = to_wire(FetchRequest("c", 2, True, 3, 10, 2))
    del wire["high_watermark"]
    assert message_from_wire(wire).high_watermark == -1


@pytest.mark.parametrize(
    "mutate",
    [
        lambda w: w.pop("cluster_id"),
        lambda w: w.update(fetch_offset="10"),
        lambda w: w.update(replica_is_voter=1),
        lambda w: w.update(type="Nope"),
        lambda w: w.update(max_wait_ms=True),
    ],
)
def test_malformed_bodies_are_wire_format_errors(mutate):
    wire = to_wire(FetchRequest("c", 2, True, 3, 10, 2))
    mutate(wire)
    with pytest.raises(WireFormatError):
        message_from_wire(wire)


def test_bad_nested_values_are_rejected():
    for wire in (
        {**to_wire(FetchSnapshotRequest("c", 2, 3, SnapshotId(4, 2), 0)), "snapshot_id": None},
        {**to_wire(FetchResponse(NONE, 1, 3)), "diverging_epoch": [1]},
        {**to_wire(FetchResponse(NONE, 1, 3)), "error": "WHATEVER"},
        {**to_wire(EndQuorumEpochRequest("c", 1, 3)), "preferred_successors": ["2"]},
        {**to_wire(FetchResponse(NONE, 1, 3)), "snapshot_id": [-1, 2]},
        [1, 2],
    ):
        with pytest.raises(WireFormatError):
            message_from_wire(wire)
