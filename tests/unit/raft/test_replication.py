"""Replication, one core at a time: fetch validation, divergence, the high watermark,
long polls, snapshot loading."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kraft.raft.config import RaftConfig
from kraft.raft.errors import NotLeaderError
from kraft.raft.memory_log import MemoryLog
from kraft.raft.messages import (
    FENCED_LEADER_EPOCH,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    UNKNOWN_LEADER_EPOCH,
    BeginQuorumEpochRequest,
    DivergingEpoch,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
)
from kraft.raft.state import ElectionState, Follower
from metadata_log.batch import iter_headers
from metadata_log.records import NoOpRecord
from metadata_log.snapshot import SnapshotId
from tests.unit.raft.helpers import (
    CLUSTER,
    CONFIG,
    answers,
    batch,
    build_log,
    elect,
    fetch,
    flush,
    make_core,
    sent,
)


def leader_with(
    epochs, voters=(1, 2, 3), config: RaftConfig = CONFIG, extra: int = 0, epoch: int = 0
):
    """A leader of `epoch` (default: the next one) whose log holds `epochs` and then
    its own epoch (LeaderChangeMessage + `extra` single-record batches), flushed."""
    log = build_log(epochs, voters=voters if epochs else None)
    last = epochs[-1][0] if epochs else 0
    before = max(epoch - 1, last)
    core = make_core(voters=voters, log=log, es=ElectionState(before, None, None), config=config)
    core.ready()
    elect(core)
    for _ in range(extra):
        core.propose_records([NoOpRecord()], core._now)
    flush(core, core._now)
    core.ready()
    return core


def offsets(records: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.leader_epoch) for _, h in iter_headers(records, "<test>")]


# ------------------------------------------------------------ validation


def test_leader_answers_a_diverged_fetch_with_the_diverging_epoch():
    # Epochs 1:[0,3) 3:[3,6) 5:[6,9): the leader won epoch 5 with 1:[0,3) 3:[3,6).
    core = leader_with([(1, 0, 3), (3, 3, 6)], extra=2, epoch=5)
    assert core.epoch == 5
    assert core.log.epoch_entries() == [(1, 0), (3, 3), (5, 6)]
    assert core.log.end_offset == 9
    core.handle_request(fetch(2, 5, 6, 2), core._now, 1)
    resp = answers(core.ready(), 1)
    assert resp.error == NONE
    assert resp.diverging_epoch == DivergingEpoch(1, 3)
    assert resp.records == b""
    # More cases of Kafka's validation.
    cases = {
        (7, 4): DivergingEpoch(3, 6),  # epoch 4 unknown: 3 ended at 6
        (6, 3): None,  # valid: 3 ended exactly at 6
        (4, 3): None,
        (8, 3): DivergingEpoch(3, 6),  # epoch 3 never reached 8
        (0, 0): None,  # an empty follower
    }
    for i, ((offset, last), want) in enumerate(cases.items(), start=2):
        core.handle_request(fetch(2, 5, offset, last, max_wait_ms=0), core._now, i)
        resp = answers(core.ready(), i)
        assert resp.diverging_epoch == want, (offset, last)
        if want is None:
            assert offsets(resp.records)[0][0] == offset


def test_diverging_fetch_does_not_count_toward_the_high_watermark():
    core = leader_with([(1, 0, 3)], extra=2)
    hw = core.high_watermark
    core.handle_request(fetch(2, core.epoch, 6, 1), core._now, 1)
    core.ready()
    assert core.state.voter_states[2].end_offset == -1
    assert core.high_watermark == hw


def test_fetch_with_the_wrong_epoch_is_fenced_or_unknown():
    core = leader_with([(1, 0, 3)])
    epoch = core.epoch
    core.handle_request(fetch(2, epoch - 1, 0, 0), core._now, 1)
    core.handle_request(fetch(2, epoch + 1, 0, 0), core._now, 2)
    r = core.ready()
    assert answers(r, 1).error == FENCED_LEADER_EPOCH
    assert answers(r, 1).leader_id == 1 and answers(r, 1).leader_epoch == epoch
    assert answers(r, 2).error == UNKNOWN_LEADER_EPOCH


def test_non_leader_answers_fetches_with_its_view():
    core = make_core(node_id=2, es=ElectionState(4, 3, None))
    core.handle_request(fetch(100, 4, 0, 0, voter=False), 0, 1)
    resp = answers(core.ready(), 1)
    assert resp.error == NOT_LEADER_OR_FOLLOWER and resp.leader_id == 3 and resp.leader_epoch == 4


# ------------------------------------------------------ follower side


def follower(log: MemoryLog | None = None, epoch: int = 5, leader: int = 1, node: int = 2):
    core = make_core(node_id=node, log=log, es=ElectionState(epoch - 1, None, None))
    core.handle_request(BeginQuorumEpochRequest(CLUSTER, leader, epoch), 0, 0)
    return core  # its first Fetch is in the next Ready


def next_fetch(core) -> tuple[int, FetchRequest]:
    fetches = sent(core.ready(), FetchRequest)
    assert len(fetches) == 1, fetches
    return fetches[0].correlation, fetches[0].message


def test_follower_truncates_to_the_diverging_end_and_fetches_again():
    log = build_log([(1, 0, 3), (2, 3, 8)])
    core = follower(log)
    corr, req = next_fetch(core)
    assert (req.fetch_offset, req.last_fetched_epoch) == (8, 2)
    core.handle_response(
        corr, FetchResponse(NONE, 1, 5, 0, 0, diverging_epoch=DivergingEpoch(1, 3)), 1
    )
    assert log.end_offset == 3
    corr, req = next_fetch(core)
    assert (req.fetch_offset, req.last_fetched_epoch) == (3, 1)


def test_follower_truncates_past_an_epoch_the_leader_never_had():
    # We hold epoch 2 only; the leader's largest epoch <= 2 is 1 (ending at 3):
    # nothing of ours is in an epoch the leader has there, so it all goes.
    log = build_log([(2, 0, 5)])
    core = follower(log)
    corr, _ = next_fetch(core)
    core.handle_response(
        corr, FetchResponse(NONE, 1, 5, 0, 0, diverging_epoch=DivergingEpoch(1, 3)), 1
    )
    assert log.end_offset == 0
    _, req = next_fetch(core)
    assert (req.fetch_offset, req.last_fetched_epoch) == (0, 0)


def test_follower_keeps_the_shorter_end_of_a_shared_epoch():
    # Epoch 1 is on both sides but the leader's ended at 2, ours at 4.
    log = build_log([(1, 0, 4), (3, 4, 6)])
    core = follower(log)
    corr, _ = next_fetch(core)
    core.handle_response(
        corr, FetchResponse(NONE, 1, 5, 0, 0, diverging_epoch=DivergingEpoch(1, 2)), 1
    )
    assert log.end_offset == 2


def test_follower_appends_and_sends_the_next_fetch_only_once_flushed():
    log = MemoryLog()
    core = follower(log)
    corr, req = next_fetch(core)
    assert req.fetch_offset == 0
    records = batch(0, 5) + batch(1, 5, count=2)
    core.handle_response(corr, FetchResponse(NONE, 1, 5, 2, 0, records), 10)
    assert log.end_offset == 3
    r = core.ready()
    assert r.flush_to == 3
    assert not sent(r, FetchRequest)  # its fetch offset would report unflushed data
    assert core.next_wake_ms() > 10  # and the shell is not asked to spin meanwhile
    assert core.high_watermark == 2
    flush(core, 11)
    _, req = next_fetch(core)
    assert (req.fetch_offset, req.last_fetched_epoch, req.high_watermark) == (3, 5, 2)


def test_follower_high_watermark_is_bounded_by_its_log_and_never_goes_back():
    log = MemoryLog()
    core = follower(log)
    corr, _ = next_fetch(core)
    core.handle_response(corr, FetchResponse(NONE, 1, 5, 10, 0, batch(0, 5, count=3)), 1)
    assert core.high_watermark == 3  # the leader's is 10, we hold 3
    flush(core, 2)
    corr, _ = next_fetch(core)
    core.handle_response(corr, FetchResponse(NONE, 1, 5, 1, 0, b""), 3)  # a stale HW
    assert core.high_watermark == 3


def test_follower_refuses_truncation_below_its_high_watermark():
    from kraft.raft.errors import TruncationBelowHighWatermarkError

    log = MemoryLog()
    core = follower(log)
    corr, _ = next_fetch(core)
    core.handle_response(corr, FetchResponse(NONE, 1, 5, 3, 0, batch(0, 5, count=3)), 1)
    flush(core, 2)
    corr, _ = next_fetch(core)
    with pytest.raises(TruncationBelowHighWatermarkError):
        core.handle_response(
            corr, FetchResponse(NONE, 1, 5, 3, 0, diverging_epoch=DivergingEpoch(4, 1)), 3
        )


def test_stale_fetch_answers_are_ignored():
    log = MemoryLog()
    core = follower(log)
    corr, _ = next_fetch(core)
    core.handle_response(corr, FetchResponse(NONE, 1, 5, 0, 0, batch(0, 5)), 1)
    core.handle_response(corr, FetchResponse(NONE, 1, 5, 0, 0, batch(0, 5)), 1)  # duplicate
    assert log.end_offset == 1


def test_fetch_answer_from_a_newer_epoch_moves_the_follower():
    core = follower(MemoryLog())
    corr, _ = next_fetch(core)
    core.handle_response(corr, FetchResponse(FENCED_LEADER_EPOCH, 3, 7), 1)
    assert isinstance(core.state, Follower) and core.epoch == 7 and core.leader_id == 3


# ------------------------------------------------------- high watermark


def test_high_watermark_needs_an_offset_of_the_leaders_epoch_on_a_majority():
    # The new leader of epoch 2 holds 1:[0,5) from the old epoch, flushed.
    log = build_log([(1, 0, 5)], voters=(1, 2, 3))
    core = make_core(log=log, es=ElectionState(1, None, None))
    core.ready()
    elect(core)
    assert core.epoch_start_offset == 5 and log.end_offset == 6
    now = core._now
    # A follower holding all of epoch 1 is not enough: offsets 0..4 are of an
    # old epoch (Raft's commit rule; Figure 8 of the Raft paper).
    core.handle_request(fetch(2, 2, 5, 1, max_wait_ms=0), now, 1)
    core.ready()
    assert core.high_watermark == 0
    # The follower now holds the LeaderChangeMessage, but the leader has not
    # flushed it: its own copy does not count yet.
    core.handle_request(fetch(2, 2, 6, 2, max_wait_ms=0), now, 2)
    core.ready()
    assert core.high_watermark == 0
    flush(core, now)
    assert core.high_watermark == 6
    assert core.ready().high_watermark == 6


def test_leader_counts_its_own_log_only_once_flushed():
    core = leader_with([], voters=(1,))
    hw = core.high_watermark
    core.propose_records([NoOpRecord()] * 3, core._now)
    assert core.high_watermark == hw
    r = core.ready()
    assert r.flush_to == core.log.end_offset and r.high_watermark is None
    flush(core, core._now)
    assert core.high_watermark == core.log.end_offset


def test_only_current_voters_fetching_as_voters_count():
    core = leader_with([], voters=(1, 2, 3), extra=3)
    end = core.log.end_offset
    core.handle_request(fetch(100, core.epoch, end, core.epoch, voter=False, max_wait_ms=0), 1, 1)
    core.handle_request(fetch(2, core.epoch, end, core.epoch, voter=False, max_wait_ms=0), 1, 2)
    core.ready()
    assert core.high_watermark == 0
    core.handle_request(fetch(3, core.epoch, end, core.epoch, max_wait_ms=0), 1, 3)
    core.ready()
    assert core.high_watermark == end


def test_leader_high_watermark_never_goes_back():
    core = leader_with([], voters=(1, 2, 3), extra=3)
    end = core.log.end_offset
    core.handle_request(fetch(2, core.epoch, end, core.epoch, max_wait_ms=0), 1, 1)
    assert core.high_watermark == end
    # The follower lost its disk and starts over: the HW stays.
    core.handle_request(fetch(2, core.epoch, 0, 0, max_wait_ms=0), 2, 2)
    core.ready()
    assert core.high_watermark == end


def test_propose_on_a_non_leader_names_the_leader():
    core = make_core(node_id=2, es=ElectionState(3, 1, None))
    with pytest.raises(NotLeaderError) as e:
        core.propose_records([NoOpRecord()], 0)
    assert e.value.leader_id == 1 and e.value.epoch == 3


# ------------------------------------------------------------ long poll


def caught_up_leader(config: RaftConfig = CONFIG):
    core = leader_with([], voters=(1, 2, 3), config=config)
    end = core.log.end_offset
    core.handle_request(fetch(2, core.epoch, end, core.epoch, max_wait_ms=0), core._now, 100)
    core.handle_request(fetch(3, core.epoch, end, core.epoch, max_wait_ms=0), core._now, 101)
    core.ready()
    assert core.high_watermark == end
    return core, end


def test_fetch_with_nothing_new_is_parked_and_answered_on_new_data():
    core, end = caught_up_leader()
    t = core._now
    core.handle_request(fetch(2, core.epoch, end, core.epoch, hw=end), t, 1)
    assert not core.ready().responses  # parked
    core.propose_records([NoOpRecord()], t + 5)
    resp = answers(core.ready(), 1)
    assert offsets(resp.records) == [(end, core.epoch)]


def test_parked_fetch_is_answered_when_the_high_watermark_moves():
    core, end = caught_up_leader()
    t = core._now
    core.propose_records([NoOpRecord()], t)  # not flushed yet
    new_end = core.log.end_offset
    core.handle_request(fetch(2, core.epoch, end, core.epoch, hw=end), t, 1)
    assert offsets(answers(core.ready(), 1).records) == [(end, core.epoch)]
    # 2 holds the new batch; the leader has not flushed it: no majority yet,
    # and 2 knows the current HW, so its next fetch is parked...
    core.handle_request(fetch(2, core.epoch, new_end, core.epoch, hw=end), t + 1, 2)
    assert not core.ready().responses
    assert core.high_watermark == end
    # ...until the leader's flush completes the majority: the HW news is held for
    # the linger (data appended meanwhile would ride along), then answered.
    flush(core, t + 2)
    r = core.ready()
    assert r.high_watermark == new_end and not r.responses
    linger = CONFIG.high_watermark_linger_ms
    assert linger > 0 and core.next_wake_ms() == t + 2 + linger
    core.tick(t + 2 + linger)
    resp = answers(core.ready(), 2)
    assert resp.high_watermark == new_end and resp.records == b""


def _fetch_that_moves_the_high_watermark(config: RaftConfig = CONFIG):
    """A leader with one new flushed batch, and follower 2's fetch (correlation 2)
    reporting that it holds it, which moves the HW; returns (core, new_end)."""
    core, end = caught_up_leader(config)
    t = core._now
    core.propose_records([NoOpRecord()], t)
    flush(core, t)
    new_end = core.log.end_offset
    core.handle_request(fetch(2, core.epoch, end, core.epoch, hw=end), t, 1)
    answers(core.ready(), 1)
    core.handle_request(fetch(2, core.epoch, new_end, core.epoch, hw=end), t, 2)
    return core, new_end


def test_data_appended_within_the_linger_rides_with_the_high_watermark_news():
    # A writer appends its next batch right after its commit: the followers get it
    # in the answer that tells them the new HW, not one round trip later.
    core, new_end = _fetch_that_moves_the_high_watermark()
    r = core.ready()
    assert r.high_watermark == new_end and not r.responses  # held, not answered HW-only
    core.propose_records([NoOpRecord()], core._now)  # the writer's next batch
    resp = answers(core.ready(), 2)
    assert resp.high_watermark == new_end and offsets(resp.records) == [(new_end, core.epoch)]


def test_high_watermark_news_at_once_with_no_linger():
    core, new_end = _fetch_that_moves_the_high_watermark(
        replace(CONFIG, high_watermark_linger_ms=0)
    )
    resp = answers(core.ready(), 2)
    assert resp.high_watermark == new_end and resp.records == b""


def test_parked_fetch_is_answered_empty_at_its_max_wait():
    core, end = caught_up_leader()
    t = core._now
    core.handle_request(fetch(2, core.epoch, end, core.epoch, max_wait_ms=500, hw=end), t, 1)
    assert not core.ready().responses
    assert core.next_wake_ms() == t + 500
    core.tick(t + 499)
    assert not core.ready().responses
    core.tick(t + 500)
    resp = answers(core.ready(), 1)
    assert resp.error == NONE and resp.records == b"" and resp.high_watermark == end


def test_fetch_from_a_replica_with_a_stale_high_watermark_is_answered_within_the_linger():
    core, end = caught_up_leader()
    t = core._now
    core.handle_request(fetch(2, core.epoch, end, core.epoch, hw=end - 1), t, 1)
    assert not core.ready().responses  # held for data to ride along...
    core.tick(t + CONFIG.high_watermark_linger_ms)  # ...but not for its max wait
    assert answers(core.ready(), 1).high_watermark == end


def test_parked_fetches_are_answered_when_the_leader_steps_down():
    core, end = caught_up_leader()
    t = core._now
    core.handle_request(fetch(2, core.epoch, end, core.epoch, hw=end), t, 1)
    core.ready()
    epoch = core.epoch
    core.handle_request(VoteRequest(CLUSTER, 3, epoch + 1, epoch, end), t + 1, 2)
    r = core.ready()
    resp = answers(r, 1)
    assert resp.error == FENCED_LEADER_EPOCH and resp.leader_epoch == epoch + 1


# ------------------------------------------------------------- snapshots


def trimmed_leader(chunk: int = 10):
    """A leader whose log was trimmed to a snapshot at 6 (epoch 3)."""
    config = RaftConfig(snapshot_chunk_bytes=chunk)
    log = build_log([(1, 0, 3), (3, 3, 6)])
    core = make_core(log=log, es=ElectionState(3, None, None), config=config)
    core.ready()
    elect(core)
    flush(core, core._now)
    for r in (2, 3):
        core.handle_request(fetch(r, 4, 7, 4, max_wait_ms=0), core._now, 90 + r)
    core.ready()
    assert core.high_watermark == 7
    sid = core.snapshot_id_at(6)
    assert sid == SnapshotId(6, 3)
    data = bytes(range(37))
    log.create_snapshot(sid, data)
    log.delete_segments_below(6)
    assert log.start_offset == 6
    return core, sid, data


def test_snapshot_id_at_validates_the_offset():
    core, sid, _ = trimmed_leader()
    assert core.snapshot_id_at(7) == SnapshotId(7, 4)
    assert core.snapshot_id_at(6) == sid
    with pytest.raises(ValueError):
        core.snapshot_id_at(8)  # beyond the high watermark
    with pytest.raises(ValueError):
        core.snapshot_id_at(3)  # below the log start


def test_follower_behind_the_log_start_loads_the_snapshot_in_chunks():
    leader, sid, data = trimmed_leader(chunk=10)
    epoch = leader.epoch
    log = MemoryLog()
    core = follower(log, epoch=epoch, node=2)
    # 1. Its fetch is below the log start: the leader names the snapshot.
    corr, req = next_fetch(core)
    leader.handle_request(req, 1, 50)
    resp = answers(leader.ready(), 50)
    assert resp.snapshot_id == sid and resp.log_start_offset == 6
    core.handle_response(corr, resp, 1)
    # 2. FetchSnapshot, chunk by chunk.
    positions = []
    for i in range(10):
        r = core.ready()
        out = sent(r, FetchSnapshotRequest)
        if not out:
            break
        o = out[0]
        positions.append(o.message.position)
        leader.handle_request(o.message, 2, 60 + i)
        chunk = answers(leader.ready(), 60 + i)
        assert chunk.size == len(data) and len(chunk.chunk) <= 10
        core.handle_response(o.correlation, chunk, 2)
    assert positions == [0, 10, 20, 30]
    assert r.snapshot_loaded == sid
    assert log.snapshot_data(sid) == data
    assert (log.start_offset, log.end_offset) == (6, 6)
    assert core.high_watermark >= 6
    # 3. Fetching resumes after the snapshot, with its epoch as the last epoch,
    # and the leader accepts that (its own cache starts with epoch 4 at 6).
    (o,) = sent(r, FetchRequest)
    assert (o.message.fetch_offset, o.message.last_fetched_epoch) == (6, 3)
    leader.handle_request(o.message, 3, 70)
    resp = answers(leader.ready(), 70)
    assert resp.diverging_epoch is None and resp.snapshot_id is None
    assert offsets(resp.records) == [(6, 4)]


def test_voters_downloading_a_snapshot_keep_the_leader_past_check_quorum():
    """Kafka's handleFetchSnapshotRequest counts the fetcher for check-quorum: both
    followers behind the log start, downloading a snapshot for longer than the
    check-quorum timeout, must not make the leader resign (it would, and their
    downloads would start over, for as long as a download outlasts the timeout)."""
    leader, sid, data = trimmed_leader(chunk=1)
    timeout = leader.config.check_quorum_timeout_ms
    start = now = leader._now
    # Their fetches are below the log start: the leader names the snapshot.
    for r in (2, 3):
        leader.handle_request(fetch(r, leader.epoch, 0, 0, max_wait_ms=0), now, 200 + r)
        assert answers(leader.ready(), 200 + r).snapshot_id == sid
    corr = 300
    for position in range(len(data)):
        now += timeout // 10
        for r in (2, 3):
            req = FetchSnapshotRequest(
                CLUSTER, r, leader.epoch, sid, position, 1, replica_is_voter=True
            )
            corr += 1
            leader.handle_request(req, now, corr)
            assert answers(leader.ready(), corr).chunk == data[position : position + 1]
        leader.tick(now)
        assert leader.is_leader, (position, now)
    assert now - start > 3 * timeout
    # An observer's download does not count: once the voters stop, it resigns.
    for _ in range(12):
        now += timeout // 4
        req = FetchSnapshotRequest(CLUSTER, 100, leader.epoch, sid, 0, 1)
        corr += 1
        leader.handle_request(req, now, corr)
        leader.ready()
        leader.tick(now)
    assert not leader.is_leader


def test_snapshot_gone_mid_transfer_restarts_from_the_fetch():
    leader, sid, _ = trimmed_leader(chunk=10)
    core = follower(MemoryLog(), epoch=leader.epoch)
    corr, req = next_fetch(core)
    leader.handle_request(req, 1, 1)
    core.handle_response(corr, answers(leader.ready(), 1), 1)
    (o,) = sent(core.ready(), FetchSnapshotRequest)
    from kraft.raft.messages import SNAPSHOT_NOT_FOUND

    core.handle_response(
        o.correlation, FetchSnapshotResponse(SNAPSHOT_NOT_FOUND, 1, leader.epoch), 2
    )
    core.tick(2 + CONFIG.retry_backoff_ms)
    r = core.ready()
    assert sent(r, FetchRequest) and not sent(r, FetchSnapshotRequest)


def test_a_trimmed_and_emptied_follower_log_can_take_batches_of_the_snapshot_epoch():
    # The follower trimmed its log at its own snapshot (6, 3) while the first
    # batch it kept was of epoch 4, then was told to truncate that batch away.
    log = build_log([(1, 0, 3), (3, 3, 6), (4, 6, 7)])
    log.create_snapshot(SnapshotId(6, 3), b"state")
    log.delete_segments_below(6)
    core = follower(log, epoch=5)
    core.high_watermark = 6
    corr, req = next_fetch(core)
    core.handle_response(
        corr, FetchResponse(NONE, 1, 5, 6, 6, diverging_epoch=DivergingEpoch(3, 6)), 1
    )
    assert (log.start_offset, log.end_offset) == (6, 6)
    corr, req = next_fetch(core)
    assert (req.fetch_offset, req.last_fetched_epoch) == (6, 3)
    core.handle_response(corr, FetchResponse(NONE, 1, 5, 6, 6, batch(6, 3)), 2)
    assert log.end_offset == 7


# ------------------------------------------------------------- describe


def test_describe_on_the_leader_shows_every_replica_like_kafka_metadata_quorum():
    core = leader_with([(1, 0, 3)], extra=3)
    epoch, end = core.epoch, core.log.end_offset
    t = core._now + 10
    core.handle_request(fetch(2, epoch, end, epoch, max_wait_ms=0), t, 1)
    core.handle_request(fetch(3, epoch, end - 2, epoch, max_wait_ms=0), t + 5, 2)
    core.handle_request(fetch(100, epoch, 1, 1, voter=False, max_wait_ms=0), t + 7, 3)
    core.ready()
    d = core.describe(t + 20)
    assert {k: d[k] for k in ("node_id", "state", "leader_id", "leader_epoch")} == {
        "node_id": 1,
        "state": "leader",
        "leader_id": 1,
        "leader_epoch": epoch,
    }
    assert d["log_end_offset"] == end and d["high_watermark"] == core.high_watermark
    rows = {r["node_id"]: r for r in d["voters"]}
    # directory_id (KIP-853): "" where not known (these replicas have none).
    assert rows[1] == {
        "node_id": 1,
        "directory_id": "",
        "log_end_offset": end,
        "lag": 0,
        "last_fetch_timestamp": t + 20,
        "last_caught_up_timestamp": t + 20,
    }
    assert rows[2] == {
        "node_id": 2,
        "directory_id": "",
        "log_end_offset": end,
        "lag": 0,
        "last_fetch_timestamp": t,
        "last_caught_up_timestamp": t,
    }
    assert rows[3]["log_end_offset"] == end - 2 and rows[3]["lag"] == 2
    assert rows[3]["last_fetch_timestamp"] == t + 5 and rows[3]["last_caught_up_timestamp"] == -1
    # An observer is listed apart and does not count as a voter.
    assert [r["node_id"] for r in d["observers"]] == [100]
    assert d["observers"][0]["lag"] == end - 1
    assert sorted(rows) == [1, 2, 3]


def test_describe_off_the_leader_names_the_state_and_the_voters():
    f = follower(epoch=5, leader=1)
    d = f.describe(0)
    assert d["state"] == "follower" and d["leader_id"] == 1 and d["leader_epoch"] == 5
    assert d["voters"] == [
        {"node_id": 1, "directory_id": ""},
        {"node_id": 2, "directory_id": ""},
        {"node_id": 3, "directory_id": ""},
    ]
    assert d["observers"] == []
    obs = make_core(node_id=100)
    assert obs.describe(0)["state"] == "observer" and obs.describe(0)["leader_id"] is None


def test_an_observer_keeping_up_with_a_busy_leader_counts_as_caught_up():
    """Kafka's ReplicaState: a fetch that reaches where the leader's log ended at the
    previous fetch shows the replica caught up as of then. A leader that appends
    between every two fetches (a broker storm) is never reached at its very end, and
    AddVoter needs a catch-up within the fetch timeout."""
    core = leader_with([(1, 0, 3)], extra=1)
    now = core._now
    offset = last_epoch = 0
    stamps = []
    for i in range(6):
        now += 100
        req = fetch(9, core.epoch, offset, last_epoch, voter=False, max_wait_ms=0)
        core.handle_request(req, now, i)
        resp = answers(core.ready(), i)
        assert resp.diverging_epoch is None and resp.records
        offset, last_epoch = offsets(resp.records)[-1]
        offset += 1
        stamps.append(core.state.observer_states[9].last_caught_up_ms)
        core.propose_records([NoOpRecord()], now)  # the leader moves on at once
        flush(core, now)
        core.ready()
    assert core.state.observer_states[9].end_offset < core.log.end_offset
    # caught up as of each previous fetch, from the second fetch on
    assert stamps[0] == -1 and stamps[2:] == [core._now - 100 * (5 - k) for k in range(1, 5)]
