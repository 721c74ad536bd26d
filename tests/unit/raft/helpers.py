"""Helpers for driving one RaftCore by hand: build logs, feed messages, read Readies."""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from kraft.raft.config import RaftConfig
from kraft.raft.core import RaftCore
from kraft.raft.memory_log import MemoryLog
from kraft.raft.messages import (
    NONE,
    FetchRequest,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.ready import Outbound, Ready
from kraft.raft.state import ElectionState
from metadata_log.batch import encode_batch
from metadata_log.records import NoOpRecord, VoterEntry, VotersRecord

CLUSTER = "unit-cluster"
CONFIG = RaftConfig()


def batch(base: int, epoch: int, count: int = 1, t: int = 0) -> bytes:
    return encode_batch(base, epoch, t, [NoOpRecord()] * count)


def voters_batch(base: int, epoch: int, voters: Iterable[int]) -> bytes:
    """A control batch holding a VotersRecord of `voters` (directory ids unknown)."""
    rec = VotersRecord(tuple(VoterEntry(v, "", "") for v in voters))
    return encode_batch(base, epoch, 0, [rec], control=True)


def build_log(
    epochs: Iterable[tuple[int, int, int]],
    flush: bool = True,
    voters: Iterable[int] | None = None,
) -> MemoryLog:
    """A log holding one single-record batch per offset: epochs [(epoch, start, end)].

    With `voters`, offset 0 holds a VotersRecord of them instead (as a quorum's
    first leader writes it), so a leader elected on it writes none."""
    log = MemoryLog()
    for epoch, start, end in epochs:
        assert start == log.end_offset, "epochs must be contiguous"
        for off in range(start, end):
            if off == 0 and voters is not None:
                log.append(voters_batch(0, epoch, voters))
            else:
                log.append(batch(off, epoch))
    if flush:
        log.flush()
    return log


def make_core(
    node_id: int = 1,
    voters: Iterable[int] = (1, 2, 3),
    log: MemoryLog | None = None,
    es: ElectionState | None = None,
    now: int = 0,
    config: RaftConfig = CONFIG,
    seed: int = 0,
) -> RaftCore:
    return RaftCore(
        node_id,
        voters,
        CLUSTER,
        log if log is not None else MemoryLog(),
        es or ElectionState(),
        config,
        random.Random(seed),
        now,
    )


def sent(r: Ready, kind: type) -> list[Outbound]:
    return [o for o in r.messages if isinstance(o.message, kind)]


def answers(r: Ready, correlation: int) -> Any:
    found = [resp for c, resp in r.responses if c == correlation]
    assert len(found) == 1, f"expected one answer to {correlation}, got {found}"
    return found[0]


def flush(core: RaftCore, now: int) -> None:
    """What the shell does with Ready.flush_to: fsync, then on_flushed."""
    log = core.log
    assert isinstance(log, MemoryLog)
    log.flush()
    core.on_flushed(log.flushed_offset, now)


def elect(core: RaftCore, now: int | None = None) -> Ready:
    """Make `core` (a voter) win an election: time out, then grant every (pre-)vote.

    Returns the Ready of the winning step (holding the BeginQuorumEpochs).
    """
    now = core.next_wake_ms() if now is None else now
    core.tick(now)
    for _ in range(4):
        r = core.ready()
        votes = sent(r, VoteRequest)
        if core.is_leader:
            return r
        assert votes, f"no vote requests from {core.state}"
        for o in votes:
            req = o.message
            epoch = core.epoch if req.pre_vote else req.candidate_epoch
            core.handle_response(
                o.correlation, VoteResponse(NONE, True, -1, epoch, req.pre_vote), now
            )
            if core.is_leader:
                break
    assert core.is_leader, core.state
    return r


def fetch(
    replica: int,
    epoch: int,
    offset: int,
    last_epoch: int,
    voter: bool = True,
    max_wait_ms: int = 500,
    hw: int = -1,
) -> FetchRequest:
    return FetchRequest(
        CLUSTER, replica, voter, epoch, offset, last_epoch, max_wait_ms, 1 << 20, hw
    )
