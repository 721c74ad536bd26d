"""Elections, one core at a time: votes, pre-votes, persistence order, resignation, observers."""

from __future__ import annotations

from dataclasses import replace

from kraft.raft.config import RaftConfig
from kraft.raft.messages import (
    INCONSISTENT_CLUSTER_ID,
    INVALID_VOTER_KEY,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.state import (
    Candidate,
    ElectionState,
    Follower,
    Leader,
    Prospective,
    Resigned,
    Unattached,
)
from metadata_log.records import NoOpRecord
from tests.unit.raft.helpers import (
    CLUSTER,
    CONFIG,
    answers,
    build_log,
    elect,
    fetch,
    flush,
    make_core,
    sent,
)

T = CONFIG.election_timeout_ms


def vote(candidate: int, epoch: int, last_epoch: int = 0, end: int = 0, pre: bool = False):
    return VoteRequest(CLUSTER, candidate, epoch, last_epoch, end, pre)


def begin(leader: int, epoch: int) -> BeginQuorumEpochRequest:
    return BeginQuorumEpochRequest(CLUSTER, leader, epoch)


# ------------------------------------------------------------------ timers


def test_fresh_voter_waits_a_randomized_election_timeout_in_t_2t():
    seen = set()
    for seed in range(50):
        core = make_core(seed=seed)
        assert isinstance(core.state, Unattached)
        wake = core.next_wake_ms()
        assert T <= wake <= 2 * T
        seen.add(wake)
    assert len(seen) > 10  # actually randomized


def test_single_voter_elects_itself_and_commits_once_flushed():
    core = make_core(voters=[1])
    core.ready()
    core.tick(core.next_wake_ms())
    assert core.is_leader and core.epoch == 1
    r = core.ready()
    assert r.election_state == ElectionState(1, 1, 1)
    # The LeaderChangeMessage, and (the first leader of a quorum bootstrapped
    # from a static voter list, KIP-853) KRaftVersionRecord + VotersRecord.
    assert r.flush_to == 3
    assert core.high_watermark == 0  # not flushed yet
    flush(core, 3)
    assert core.high_watermark == 3
    assert core.ready().high_watermark == 3


# ------------------------------------------------------- pre-vote, then vote


def test_timeout_starts_a_prevote_that_persists_nothing():
    core = make_core()
    core.ready()
    core.tick(core.next_wake_ms())
    assert isinstance(core.state, Prospective)
    assert core.epoch == 0  # KIP-996: no epoch bump
    r = core.ready()
    assert r.election_state is None  # nothing written
    reqs = sent(r, VoteRequest)
    assert sorted(o.destination for o in reqs) == [2, 3]
    assert all(o.message.pre_vote and o.message.candidate_epoch == 1 for o in reqs)


def test_prevote_majority_makes_a_candidate_that_persists_before_asking():
    core = make_core()
    core.ready()
    now = core.next_wake_ms()
    core.tick(now)
    o = sent(core.ready(), VoteRequest)[0]
    core.handle_response(o.correlation, VoteResponse(NONE, True, -1, 0, True), now + 1)
    assert isinstance(core.state, Candidate) and core.epoch == 1
    r = core.ready()
    # The vote for itself is in the same Ready as the requests: the shell writes
    # the quorum-state file before sending them.
    assert r.election_state == ElectionState(1, None, 1)
    reqs = sent(r, VoteRequest)
    assert reqs and all(not o.message.pre_vote and o.message.candidate_epoch == 1 for o in reqs)


def test_winner_persists_leadership_and_sends_begin_quorum_epoch():
    core = make_core()
    core.ready()
    r = elect(core)
    assert r.election_state == ElectionState(1, 1, 1)
    assert sorted(o.destination for o in sent(r, BeginQuorumEpochRequest)) == [2, 3]
    # LeaderChangeMessage + KRaftVersionRecord + VotersRecord (the bootstrap set)
    assert core.log.end_offset == 3


def test_failed_vote_request_is_retried_after_backoff():
    core = make_core()
    core.ready()
    now = core.next_wake_ms()
    core.tick(now)
    reqs = {o.destination: o for o in sent(core.ready(), VoteRequest)}
    core.request_failed(reqs[2].correlation, now + 1)
    assert not sent(core.ready(), VoteRequest)
    assert core.next_wake_ms() == now + 1 + CONFIG.retry_backoff_ms
    core.tick(now + 1 + CONFIG.retry_backoff_ms)
    again = sent(core.ready(), VoteRequest)
    assert [o.destination for o in again] == [2]


# ----------------------------------------------------------- granting votes


def test_vote_grant_is_persisted_in_the_same_ready_as_the_answer():
    core = make_core(node_id=2)
    core.ready()
    core.handle_request(vote(1, 1), 10, correlation=7)
    r = core.ready()
    assert r.election_state == ElectionState(1, None, 1)
    resp = answers(r, 7)
    assert resp.vote_granted and resp.leader_epoch == 1


def test_one_vote_per_epoch():
    core = make_core(node_id=2)
    core.handle_request(vote(1, 1), 10, 1)
    core.ready()
    core.handle_request(vote(3, 1), 11, 2)
    r = core.ready()
    assert not answers(r, 2).vote_granted
    assert r.election_state is None
    core.handle_request(vote(1, 1), 12, 3)  # a retry from the same candidate
    assert answers(core.ready(), 3).vote_granted


def test_a_node_that_cannot_campaign_keeps_its_vote_across_a_restart():
    # KIP-853: node 4 was added as a voter and voted for 1 in epoch 5 before its
    # log showed the VotersRecord adding it; it then restarted. Candidates still
    # ask it, so the vote must hold: a second one in epoch 5 could elect a second
    # leader of that epoch.
    for es in (ElectionState(5, None, 1), ElectionState(5, 1, 1)):
        core = make_core(node_id=4, voters=(1, 2, 3), es=es)
        assert not core.is_voter
        core.handle_request(vote(2, 5), 10, 1)
        r = core.ready()
        assert not answers(r, 1).vote_granted, es
        assert r.election_state is None  # nothing new written
        if es.leader_id is None:  # unattached: the same candidate again is idempotent
            core.handle_request(vote(1, 5), 11, 2)
            assert answers(core.ready(), 2).vote_granted


def test_a_follower_whose_leader_went_silent_keeps_its_vote_in_that_epoch():
    # Node 4 (not a voter by its log) voted for 2, which then led epoch 5; 2 went
    # silent. Unattached in the same epoch, 4 must not grant 3 a second vote.
    core = make_core(node_id=4, voters=(1, 2, 3), es=ElectionState(5, 2, 2))
    core.tick(core.next_wake_ms())
    r = core.ready()
    assert isinstance(core.state, Unattached) and core.epoch == 5
    assert r.election_state is None or r.election_state.voted_id == 2
    core.handle_request(vote(3, 5), core._now, 1)
    assert not answers(core.ready(), 1).vote_granted
    # a later epoch is a new vote
    core.handle_request(vote(3, 6), core._now, 2)
    assert answers(core.ready(), 2).vote_granted


def test_vote_refused_to_a_less_up_to_date_log():
    log = build_log([(1, 0, 2), (2, 2, 5)])
    core = make_core(node_id=2, log=log, es=ElectionState(2, None, None))
    core.ready()
    for i, (last_epoch, end, granted) in enumerate(
        [(1, 10, False), (2, 4, False), (2, 5, True)], start=1
    ):
        c = make_core(node_id=2, log=log, es=ElectionState(2, None, None))
        c.handle_request(vote(1, 3, last_epoch, end), 5, i)
        assert answers(c.ready(), i).vote_granted is granted, (last_epoch, end)
        assert c.epoch == 3  # a higher epoch is adopted even when refused
    core.handle_request(vote(3, 3, 3, 1), 5, 9)
    assert answers(core.ready(), 9).vote_granted


def test_vote_request_from_a_non_voter_is_answered_by_the_log_rule():
    # KIP-853: voter sets differ between replicas for a while (a new voter may
    # be needed to elect a leader before everyone read the record adding it),
    # so the candidate need not be in this node's voter set; it counts only
    # the votes of its own voters.
    core = make_core(node_id=2)
    core.handle_request(vote(100, 1), 5, 1)
    resp = answers(core.ready(), 1)
    assert resp.error == NONE and resp.vote_granted
    assert core.epoch == 1


def test_vote_request_for_another_directory_id_is_refused():
    # The candidate asks the voter (2, "dir-a"); this replica is (2, "dir-b"): a
    # disk that was wiped and formatted again is not the voter it replaced.
    core = make_core(node_id=2)
    core.directory_id = "dir-b"
    core.handle_request(replace(vote(1, 1), voter_directory_id="dir-a"), 5, 1)
    resp = answers(core.ready(), 1)
    assert resp.error == INVALID_VOTER_KEY and not resp.vote_granted
    assert core.epoch == 0


def test_cluster_id_mismatch_is_refused_without_effect():
    core = make_core(node_id=2)
    core.handle_request(VoteRequest("other", 1, 5, 0, 0), 5, 1)
    resp = answers(core.ready(), 1)
    assert resp.error == INCONSISTENT_CLUSTER_ID and not resp.vote_granted
    assert core.epoch == 0


def test_an_answer_from_another_cluster_teaches_no_epoch():
    """A node of another cluster named among the voters answers every request with
    INCONSISTENT_CLUSTER_ID and its own epoch: learning it let that node force the
    leader out (an epoch of 50 from a quorum-state, and an election here)."""
    core = make_core()
    core.ready()
    r = elect(core)
    now = core._now
    begins = {o.destination: o for o in sent(r, BeginQuorumEpochRequest)}
    foreign = BeginQuorumEpochResponse(INCONSISTENT_CLUSTER_ID, -1, 50)
    core.handle_response(begins[3].correlation, foreign, now)
    assert core.is_leader and core.epoch == 1
    core.ready()
    # no answer at all: it is asked again after the backoff, as after a failure
    core.tick(now + CONFIG.retry_backoff_ms)
    assert [o.destination for o in sent(core.ready(), BeginQuorumEpochRequest)] == [3]
    # a pre-vote's answer alike
    other = make_core(node_id=2)
    other.ready()
    other.tick(other.next_wake_ms())
    (ask, *_) = sent(other.ready(), VoteRequest)
    answer = VoteResponse(INCONSISTENT_CLUSTER_ID, False, 3, 50, True)
    other.handle_response(ask.correlation, answer, other._now)
    assert other.epoch == 0 and isinstance(other.state, Prospective), other.state


def test_prevote_grant_changes_nothing():
    core = make_core(node_id=2, es=ElectionState(3, None, None))
    core.ready()
    before = core.state
    core.handle_request(vote(1, 4, pre=True), 5, 1)
    r = core.ready()
    resp = answers(r, 1)
    assert resp.vote_granted and resp.pre_vote
    assert r.election_state is None
    assert core.epoch == 3 and core.state is before and core.election_state.voted_id is None
    # The real vote of epoch 4 is still free for anyone.
    core.handle_request(vote(3, 4), 6, 2)
    assert answers(core.ready(), 2).vote_granted


def test_prevote_for_an_old_epoch_is_refused_with_ours():
    core = make_core(node_id=2, es=ElectionState(5, None, None))
    core.handle_request(vote(1, 5, pre=True), 5, 1)
    resp = answers(core.ready(), 1)
    assert not resp.vote_granted and resp.leader_epoch == 5


def test_follower_with_a_live_leader_rejects_prevotes_until_it_resigns():
    core = make_core(node_id=2)
    core.handle_request(begin(1, 1), 10, 1)
    core.ready()
    assert isinstance(core.state, Follower) and core.state.leader_contacted
    core.handle_request(vote(3, 2, pre=True), 20, 2)
    r = core.ready()
    assert not answers(r, 2).vote_granted
    assert answers(r, 2).leader_id == 1  # the prospective learns who leads
    # The leader hands over (graceful shutdown): now pre-votes are granted.
    core.handle_request(EndQuorumEpochRequest(CLUSTER, 1, 1, (3, 2)), 30, 3)
    core.handle_request(vote(3, 2, pre=True), 31, 4)
    assert answers(core.ready(), 4).vote_granted
    assert core.epoch == 1


def test_follower_that_lost_its_leader_grants_prevotes():
    core = make_core(node_id=3)
    core.handle_request(begin(1, 1), 10, 1)
    core.ready()
    core.tick(10 + CONFIG.fetch_timeout_ms)  # no fetch answered since
    assert isinstance(core.state, Prospective)
    core.handle_request(vote(2, 2, pre=True), 10 + CONFIG.fetch_timeout_ms, 2)
    assert answers(core.ready(), 2).vote_granted


def test_prospectives_of_one_epoch_break_the_tie_so_only_one_becomes_candidate():
    # Followers of a dead leader time out together. If each prospective granted
    # the other, both would become candidates and split the vote.
    def prospective(node_id: int, log=None):
        core = make_core(node_id=node_id, log=log)
        core.handle_request(begin(1, 1), 10, 1)
        core.ready()
        core.tick(10 + CONFIG.fetch_timeout_ms)
        assert isinstance(core.state, Prospective)
        core.ready()
        return core

    now = 10 + CONFIG.fetch_timeout_ms
    two, three = prospective(2), prospective(3)
    two.handle_request(vote(3, 2, pre=True), now, 1)  # equal logs, higher id: no
    assert not answers(two.ready(), 1).vote_granted
    three.handle_request(vote(2, 2, pre=True), now, 1)  # equal logs, lower id: yes
    assert answers(three.ready(), 1).vote_granted
    assert isinstance(two.state, Prospective) and isinstance(three.state, Prospective)
    # A strictly more up-to-date log wins whatever its id.
    behind = prospective(2)
    behind.handle_request(vote(3, 2, 1, 5, pre=True), now, 1)
    assert answers(behind.ready(), 1).vote_granted
    ahead = prospective(2, log=build_log([(1, 0, 5)]))
    ahead.handle_request(vote(3, 2, 1, 4, pre=True), now, 1)
    assert not answers(ahead.ready(), 1).vote_granted


def test_restarted_follower_has_not_heard_from_its_leader_and_grants_prevotes():
    core = make_core(node_id=2, es=ElectionState(4, 1, None))
    assert isinstance(core.state, Follower) and not core.state.leader_contacted
    core.handle_request(vote(3, 5, pre=True), 5, 1)
    assert answers(core.ready(), 1).vote_granted


def test_prospective_keeps_campaigning_on_rejections_naming_the_lost_leader():
    core = make_core(node_id=2)
    core.handle_request(begin(1, 1), 0, 1)
    core.ready()
    now = CONFIG.fetch_timeout_ms
    core.tick(now)
    assert isinstance(core.state, Prospective) and core.state.leader_id == 1
    o = next(o for o in sent(core.ready(), VoteRequest) if o.destination == 3)
    core.handle_response(o.correlation, VoteResponse(NONE, False, 1, 1, True), now + 1)
    assert isinstance(core.state, Prospective)  # others may have lost leader 1 too
    # Losing the pre-vote election takes it back to the leader it knew (KIP-996).
    core.tick(core.state.election_deadline_ms)
    assert isinstance(core.state, Follower) and core.state.leader_id == 1
    assert sent(core.ready(), FetchRequest)


def test_candidate_learning_the_leader_of_its_epoch_follows_it():
    core = make_core()
    core.ready()
    now = core.next_wake_ms()
    core.tick(now)
    o = sent(core.ready(), VoteRequest)[0]
    core.handle_response(o.correlation, VoteResponse(NONE, True, -1, 0, True), now)
    assert isinstance(core.state, Candidate)
    core.handle_request(begin(3, 1), now + 1, 9)
    assert isinstance(core.state, Follower) and core.leader_id == 3


# ------------------------------------------------------------------ Resigned


def test_restarted_leader_comes_back_resigned():
    log = build_log([(5, 0, 3)])
    core = make_core(log=log, es=ElectionState(5, 1, 1))
    assert isinstance(core.state, Resigned) and core.epoch == 5
    assert core.state_name == "resigned" and core.leader_id is None
    r = core.ready()
    # It tells the others it is gone, so they elect without waiting a fetch timeout.
    assert sorted(o.destination for o in sent(r, EndQuorumEpochRequest)) == [2, 3]
    # It refuses votes in its own epoch...
    core.handle_request(vote(2, 5, 5, 3), 1, 1)
    assert not answers(core.ready(), 1).vote_granted
    # ...and grants them in a higher one.
    core.handle_request(vote(2, 6, 5, 3), 2, 2)
    r = core.ready()
    assert answers(r, 2).vote_granted
    assert r.election_state == ElectionState(6, None, 2)


def test_log_epoch_above_the_quorum_state_starts_unattached_in_the_log_epoch():
    # The log holds epoch 5 but quorum-state says epoch 3 (a lost or stale file):
    # Kafka's QuorumState.initialize starts Unattached in epoch 5 with no vote.
    log = build_log([(3, 0, 2), (5, 2, 4)])
    core = make_core(log=log, es=ElectionState(3, 1, 1))
    assert isinstance(core.state, Unattached) and core.epoch == 5
    assert core.state.voted_id is None and core.leader_id is None
    r = core.ready()
    assert r.election_state == ElectionState(5, None, None)  # written before anything
    # A vote in an epoch below the log's is refused; one in 5 for an up-to-date log is granted.
    core.handle_request(vote(2, 4, 5, 4), 1, 1)
    assert not answers(core.ready(), 1).vote_granted
    core.handle_request(vote(2, 5, 5, 4), 2, 2)
    assert answers(core.ready(), 2).vote_granted
    # A single voter in that position elects itself at once, in a later epoch.
    solo = make_core(voters=[1], log=build_log([(3, 0, 2), (5, 2, 4)]), es=ElectionState(3, 1, 1))
    solo.tick(solo.next_wake_ms())
    assert solo.is_leader and solo.epoch == 6


def test_resigned_leader_campaigns_again_after_the_election_timeout():
    core = make_core(voters=[1], es=ElectionState(3, 1, 1))
    assert isinstance(core.state, Resigned)
    core.tick(core.next_wake_ms())
    assert core.is_leader and core.epoch == 4


def test_resigned_node_refuses_begin_quorum_epoch_from_another_in_its_epoch():
    core = make_core(es=ElectionState(5, 1, 1))
    core.handle_request(begin(2, 5), 1, 1)
    assert isinstance(core.state, Resigned)
    core.handle_request(begin(2, 6), 2, 2)
    assert isinstance(core.state, Follower) and core.leader_id == 2


# ------------------------------------------------------------- check quorum


def _leader(voters=(1, 2, 3), config: RaftConfig = CONFIG):
    core = make_core(voters=voters, config=config)
    core.ready()
    elect(core)
    core.ready()
    return core


def test_check_quorum_resigns_a_leader_no_majority_fetched_from():
    core = _leader()
    start = core._now
    deadline = start + CONFIG.check_quorum_timeout_ms
    assert CONFIG.check_quorum_timeout_ms == 3000  # 1.5 x fetch timeout
    core.tick(deadline - 1)
    assert core.is_leader
    core.tick(deadline)
    assert isinstance(core.state, Resigned)
    ends = sent(core.ready(), EndQuorumEpochRequest)
    assert sorted(o.destination for o in ends) == [2, 3]


def test_check_quorum_is_satisfied_by_a_fetching_majority():
    core = _leader(voters=(1, 2, 3, 4, 5))
    now = core._now
    for _ in range(10):
        now += 1000
        for replica in (2, 3):  # with the leader: 3 of 5
            core.handle_request(fetch(replica, core.epoch, 0, 0, max_wait_ms=0), now, now + replica)
        core.tick(now)
        assert core.is_leader
    # Observers and non-voting fetches do not count.
    for _ in range(4):
        now += 1000
        core.handle_request(fetch(100, core.epoch, 0, 0, voter=False, max_wait_ms=0), now, now)
        core.tick(now)
    assert isinstance(core.state, Resigned)


def test_single_voter_never_resigns_for_check_quorum():
    core = _leader(voters=(1,))
    core.tick(10_000_000)
    assert core.is_leader


# --------------------------------------------------------------- observers


def test_observers_never_start_elections():
    core = make_core(node_id=100)
    assert core.state_name == "observer" and not core.is_voter
    now = 0
    for _ in range(200):
        now = max(core.next_wake_ms(), now + 97)
        core.tick(now)
        r = core.ready()
        assert not sent(r, VoteRequest)
        assert r.election_state is None or r.election_state.voted_id is None
        assert not isinstance(core.state, Prospective | Candidate | Leader)
        for o in sent(r, FetchRequest):
            assert not o.message.replica_is_voter
            core.request_failed(o.correlation, now)
    # ...but answer a vote request by the log rule (KIP-853: it may be a voter
    # in the candidate's newer voter set).
    core.handle_request(vote(1, core.epoch + 1), now, 1)
    assert answers(core.ready(), 1).error == NONE


def test_observer_asks_the_voters_in_turn_until_one_names_the_leader():
    core = make_core(node_id=100)
    asked = []
    now = 0
    for _ in range(3):
        now = max(core.next_wake_ms(), now)
        core.tick(now)
        o = sent(core.ready(), FetchRequest)[0]
        asked.append(o.destination)
        # A voter that does not know the leader either.
        core.handle_response(
            o.correlation, FetchResponse(NOT_LEADER_OR_FOLLOWER, -1, 0, log_start_offset=-1), now
        )
    assert len(set(asked)) == 3
    now = max(core.next_wake_ms(), now)
    core.tick(now)
    o = sent(core.ready(), FetchRequest)[0]
    core.handle_response(o.correlation, FetchResponse(NOT_LEADER_OR_FOLLOWER, 2, 4), now)
    assert isinstance(core.state, Follower) and core.leader_id == 2 and core.epoch == 4
    o = sent(core.ready(), FetchRequest)[0]
    assert o.destination == 2 and o.message.replica_epoch == 4


# ------------------------------------------------------------ EndQuorumEpoch


def test_end_quorum_epoch_lists_successors_by_fetch_offset():
    core = _leader(voters=(1, 2, 3, 4, 5))
    epoch = core.epoch
    now = core._now
    for _ in range(6):
        core.propose_records([NoOpRecord()], now)
    flush(core, now)
    end = core.log.end_offset
    # 4 is furthest, then 2, then 3; 5 never fetched.
    for replica, offset in ((2, end - 2), (3, end - 4), (4, end)):
        core.handle_request(fetch(replica, epoch, offset, epoch, max_wait_ms=0), now, replica)
    core.ready()
    core.resign(now + 1)
    assert isinstance(core.state, Resigned)
    (first, *_) = reqs = sent(core.ready(), EndQuorumEpochRequest)
    assert sorted(o.destination for o in reqs) == [2, 3, 4, 5]
    assert first.message.preferred_successors == (4, 2, 3, 5)
    assert first.message.leader_epoch == epoch
    # Acknowledged voters are not asked again; the others are, after a timeout.
    for o in reqs[:2]:
        core.handle_response(o.correlation, EndQuorumEpochResponse(NONE, -1, epoch), now + 2)
    for o in reqs[2:]:
        core.request_failed(o.correlation, now + 2)
    core.tick(now + 2 + CONFIG.retry_backoff_ms)
    again = sent(core.ready(), EndQuorumEpochRequest)
    assert sorted(o.destination for o in again) == sorted(o.destination for o in reqs[2:])


def test_first_successor_campaigns_at_once_others_back_off():
    timings = {}
    for me in (2, 3, 5):
        core = make_core(node_id=me, voters=(1, 2, 3, 4, 5))
        core.handle_request(begin(1, 1), 0, 1)
        core.ready()
        core.handle_request(EndQuorumEpochRequest(CLUSTER, 1, 1, (2, 3, 4)), 100, 2)
        assert answers(core.ready(), 2).error == NONE
        timings[me] = core.next_wake_ms() - 100
    assert timings[2] == 0
    assert 0 < timings[3] < CONFIG.fetch_timeout_ms
    assert timings[5] >= T  # not listed: a normal election timeout


def test_a_voter_that_missed_the_leaders_begin_follows_its_resignation():
    # Voter 2 voted for 1 in epoch 1 but never got 1's BeginQuorumEpoch; 1 then
    # resigns naming 2 first. As Kafka, 2 takes the leader from the EndQuorumEpoch
    # and campaigns at once instead of after a whole election timeout.
    core = make_core(node_id=2, voters=(1, 2, 3))
    core.handle_request(vote(1, 1), 0, 1)
    assert answers(core.ready(), 1).vote_granted
    assert isinstance(core.state, Unattached)
    core.handle_request(EndQuorumEpochRequest(CLUSTER, 1, 1, (2, 3)), 100, 2)
    assert answers(core.ready(), 2).error == NONE
    assert isinstance(core.state, Follower) and core.state.leader_resigned
    assert core.next_wake_ms() == 100
    assert core._election.voted_id == 1  # the vote stays cast


def test_end_quorum_epoch_naming_nobody_makes_every_voter_campaign_at_once():
    # A leader that comes back Resigned after a restart names no successor; its
    # followers should not sit out a whole election timeout without a leader.
    for me in (2, 3):
        core = make_core(node_id=me, voters=(1, 2, 3))
        core.handle_request(begin(1, 1), 0, 1)
        core.ready()
        core.handle_request(EndQuorumEpochRequest(CLUSTER, 1, 1, ()), 100, 1)
        assert answers(core.ready(), 1).error == NONE
        assert core.next_wake_ms() == 100
        core.tick(100)
        assert not isinstance(core.state, Follower)  # a pre-vote has started


def test_begin_quorum_epoch_is_resent_until_acknowledged():
    core = make_core()
    core.ready()
    r = elect(core)
    now = core._now
    begins = {o.destination: o for o in sent(r, BeginQuorumEpochRequest)}
    core.handle_response(begins[2].correlation, BeginQuorumEpochResponse(NONE, 1, 1), now)
    core.request_failed(begins[3].correlation, now)
    core.tick(now + CONFIG.retry_backoff_ms)
    again = sent(core.ready(), BeginQuorumEpochRequest)
    assert [o.destination for o in again] == [3]
    # A fetch from 3 acknowledges the epoch as well.
    core.handle_request(fetch(3, 1, 0, 0, max_wait_ms=0), now + 30, 5)
    core.request_failed(again[0].correlation, now + 31)
    core.tick(now + 10_000)
    assert not sent(core.ready(), BeginQuorumEpochRequest)


# ----------------------------------------------------- stuck higher epochs


def test_leader_steps_down_for_a_voter_stuck_in_a_higher_epoch():
    core = _leader()
    epoch = core.epoch
    # Its own pre-vote round (epoch + 1) is refused: a partitioned node never
    # gets further, and it must not unseat us.
    core.handle_request(vote(2, epoch + 1, pre=True), 10, 1)
    assert core.is_leader and not answers(core.ready(), 1).vote_granted
    # A voter that became a candidate in epoch + 1 and lost touch cannot come
    # back to our epoch: the leader moves the quorum past it.
    core.handle_request(vote(2, epoch + 2, pre=True), 11, 2)
    assert isinstance(core.state, Unattached) and core.epoch == epoch + 1
    assert not answers(core.ready(), 2).vote_granted


def test_follower_answers_begin_quorum_epoch_and_rejects_stale_ones():
    core = make_core(node_id=2)
    core.handle_request(begin(1, 3), 0, 1)
    r = core.ready()
    assert r.election_state == ElectionState(3, 1, None)
    assert answers(r, 1).error == NONE
    core.handle_request(begin(3, 2), 1, 2)
    resp = answers(core.ready(), 2)
    assert resp.error != NONE and resp.leader_epoch == 3 and resp.leader_id == 1
