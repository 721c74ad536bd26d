"""RaftCore: Kafka's pull-based Raft (KIP-595, with KIP-996 pre-vote) as a pure state machine.

No I/O, no clock, no global randomness: every entry point takes `now_ms`, the
randomness comes from the `rng` given at construction, and everything the core
wants done comes out of `ready()` (see kraft.raft.ready for the order the shell
must follow). The log is called directly for append / read / truncate (as
KafkaRaftClient calls its ReplicatedLog), but flushing is the shell's: the core
asks for it in Ready.flush_to and learns it happened from `on_flushed`, so that
durability decisions are explicit:

- the leader counts its own log end offset toward the high watermark only up
  to its flushed offset;
- a follower sends its next Fetch (whose fetch_offset is its log end offset)
  only once everything it appended is flushed, so a fetch offset always
  reports durable data;
- a new ElectionState is persisted before any message of the same Ready is sent.

Entry points (the shell serialises them on one task):
  handle_request(request, now_ms, correlation)   inbound RPC; its response comes
                                                 out of a later ready().responses
  handle_response(correlation, response, now_ms) answer to one of our requests
  request_failed(correlation, now_ms)            that request got no answer
  tick(now_ms)                                   timers; call at next_wake_ms()
  propose(payloads, now_ms) / propose_records    leader appends
  resign(now_ms)                                 graceful hand-over
  add_voter / remove_voter                       KIP-853 membership changes (leader)
  on_flushed(offset, now_ms)                     the log is durable up to offset
  ready() -> Ready                               what to persist/send/apply

Where the rest lives (the core owns the state and the RPC handlers, and asks):
  kraft.raft.transitions     the named transitions (Kafka's QuorumState)
  kraft.raft.roles           each state's timers and polling (tick, next_wake_ms
                             and _poll ask one role per state type)
  kraft.raft.membership      KIP-853: the voter-set history, reconfiguration rules
  kraft.raft.leader_progress the leader's view of its replicas (Kafka's LeaderState)
  kraft.raft.follower_log    a follower applying the leader's answers to its log
  kraft.raft.log_positions   positions read off the log (validateOffsetAndEpoch)
  kraft.raft.describe        DescribeQuorum; kraft.raft.errors: the exceptions
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any

from kraft.raft import follower_log, log_positions, transitions
from kraft.raft.config import RaftConfig
from kraft.raft.describe import describe_quorum
from kraft.raft.errors import NotLeaderError
from kraft.raft.leader_progress import preferred_successors, update_replica
from kraft.raft.membership import Membership, as_voter_set
from kraft.raft.messages import (
    FENCED_LEADER_EPOCH,
    INCONSISTENT_CLUSTER_ID,
    INVALID_VOTER_KEY,
    NO_LEADER,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_OUT_OF_RANGE,
    POSITION_OUT_OF_RANGE,
    RESPONSE_TYPES,
    SNAPSHOT_NOT_FOUND,
    UNKNOWN_LEADER_EPOCH,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    RaftRequest,
    RaftResponse,
    VoteRequest,
    VoteResponse,
    error_response,
)
from kraft.raft.purgatory import Purgatory
from kraft.raft.ready import Outbound, Ready
from kraft.raft.replicated_log import ReplicatedLog
from kraft.raft.roles import role_of
from kraft.raft.state import (
    Candidate,
    ElectionState,
    Follower,
    InFlight,
    Leader,
    LeaderAndEpoch,
    ParkedFetch,
    Prospective,
    QuorumState,
    ReplicaState,
    Resigned,
    SnapshotFetch,
    Unattached,
)
from kraft.raft.voters import UNKNOWN_DIRECTORY, Voter, VoterSet
from metadata_log.batch import HEADER_SIZE, encode_batch, encode_payload
from metadata_log.records import (
    Record,
    VotersRecord,
)
from metadata_log.snapshot import SnapshotId


def _payload(entry: Any) -> tuple[bytes, int]:
    """(records section, record count) from an EncodedBatch-like object or a pair."""
    if isinstance(entry, tuple):
        return entry[0], entry[1]
    return entry.payload, entry.record_count


class RaftCore:
    def __init__(
        self,
        node_id: int,
        voters: Iterable[int] | VoterSet | None,
        cluster_id: str,
        log: ReplicatedLog,
        election_state: ElectionState,
        config: RaftConfig,
        rng: random.Random,
        now_ms: int,
        *,
        directory_id: str = UNKNOWN_DIRECTORY,
        bootstrap_servers: Sequence[int] = (),
    ) -> None:
        """`voters` is the bootstrap voter set (controller.quorum.voters; ids only,
        or a VoterSet with directory ids and URLs); a VotersRecord in the log or
        the snapshot supersedes it. None: this node was started with
        --bootstrap-controllers and learns the set from the log; until then it
        fetches from `bootstrap_servers` (the shell's ids for those URLs).
        `directory_id` is this node's, from meta.properties.
        A node that is not a voter is an observer."""
        self.node_id = node_id
        self.directory_id = directory_id
        self._membership = Membership(
            node_id, directory_id, as_voter_set(voters), bootstrap_servers
        )
        self.cluster_id = cluster_id
        self.log = log
        self.config = config
        self._rng = rng
        self._now = now_ms
        # Wall clock minus the core's clock, set by the shell: the core's clock is
        # monotonic (its timers must not step), but a batch's append time is a
        # timestamp that readers compare with the calendar. Used for nothing else.
        self.wall_offset_ms = 0
        self._election = election_state
        self._pending_election: ElectionState | None = None
        self._outbox: list[Outbound] = []
        self._responses: list[tuple[int, RaftResponse]] = []
        self._inflight: dict[int, InFlight] = {}
        self._next_correlation = 0
        self._purgatory: Purgatory[ParkedFetch] = Purgatory()
        # The high watermark never goes back while this object lives. A snapshot
        # covers only committed data, so its end is a safe starting point.
        snap = log.latest_snapshot_id()
        self.high_watermark = max(log.start_offset, snap.end_offset if snap else 0)
        self._reported_hw = -1
        self._flush_requested = log.flushed_offset
        self._fetch_correlation: int | None = None
        self._fetch_backoff_until = 0
        self._bootstrap_index = 0
        self._snapshot_fetch: SnapshotFetch | None = None
        self._snapshot_loaded: SnapshotId | None = None
        self._reported_leader: LeaderAndEpoch | None = None
        self._membership.load(log)
        transitions.voters_changed(self)
        self.state: QuorumState = transitions.initial_state(self, election_state)
        self._after()

    # ================================================================ properties

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def leader_id(self) -> int | None:
        match self.state:
            case Leader():
                return self.node_id
            case Follower(leader_id=leader_id):
                return leader_id
        return None

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return LeaderAndEpoch(self.leader_id, self.epoch)

    @property
    def is_leader(self) -> bool:
        return isinstance(self.state, Leader)

    @property
    def state_name(self) -> str:
        """Kafka's names; `observer` for a non-voter (DESIGN 1.2)."""
        return self.state.name if self.is_voter else "observer"

    @property
    def election_state(self) -> ElectionState:
        """The latest election state (persisted once the pending Ready is handled)."""
        return self._election

    @property
    def epoch_start_offset(self) -> int | None:
        s = self.state
        return s.epoch_start_offset if isinstance(s, Leader) else None

    @property
    def voter_set(self) -> VoterSet:
        """The voter set in force (the newest in the log, KIP-853)."""
        return self._membership.voter_set

    @property
    def voters(self) -> frozenset[int]:
        return self._membership.voters

    @property
    def is_voter(self) -> bool:
        """A voter by key (node id and directory id) of the set in force."""
        return self._membership.is_voter

    def _majority(self) -> int:
        return self._membership.majority

    def _can_campaign(self) -> bool:
        return self._membership.can_campaign(self.high_watermark)

    # ============================================================== voter set

    def endpoint(self, node_id: int) -> str | None:
        """The URL of `node_id` as this node knows it (voter set, or learned from a leader)."""
        return self._membership.endpoint(node_id)

    def voters_record_at(self, end_offset: int) -> VotersRecord | None:
        """The voter set in force for a snapshot ending at `end_offset` (for its writer)."""
        return self._membership.voters_record_at(end_offset)

    @property
    def voters_version(self) -> int:
        """Bumped whenever the voter set in force changes (for the shell's endpoints)."""
        return self._membership.version

    @property
    def pending_voter_change(self) -> int | None:
        """Offset of an uncommitted VotersRecord, if any."""
        return self._membership.pending_change(self.high_watermark)

    def _leader_for_reconfig(self, now_ms: int) -> Leader:
        self._now = max(self._now, now_ms)
        s = self.state
        if not isinstance(s, Leader):
            raise NotLeaderError(self.leader_id, self.epoch)
        return s

    def _append_voters(self, s: Leader, new: VoterSet) -> int:
        offset = self.log.end_offset
        batch = encode_batch(
            offset, s.epoch, self._now + self.wall_offset_ms, [new.to_record()], control=True
        )
        self.log.append(batch)
        self._membership.history.add(offset, new)
        transitions.voters_changed(self)
        self._wake_fetches()
        return offset

    def add_voter(self, node_id: int, directory_id: str, url: str, now_ms: int) -> int:
        """AddVoter (KIP-853) on the leader: append a VotersRecord with the new voter;
        returns its offset (the change is done when it commits).

        The new voter must be a replica fetching from this leader with that
        directory id, caught up (at the log end within the fetch timeout).
        Raises NotLeaderError or ReconfigError.
        """
        voter = Voter(node_id, directory_id, url)
        Membership.check_new_voter(voter)  # a malformed request, whoever leads
        s = self._leader_for_reconfig(now_ms)
        new = self._membership.after_add(
            s,
            voter,
            self.high_watermark,
            self._now,
            self.config.fetch_timeout_ms,
            self.log.end_offset,
        )
        offset = self._append_voters(s, new)
        self._after()
        return offset

    def remove_voter(self, node_id: int, directory_id: str, now_ms: int) -> int:
        """RemoveVoter (KIP-853) on the leader: append a VotersRecord without the
        voter (id and, when given, directory id must match); returns its offset.

        Removing the leader itself is allowed: it keeps leading until the change
        commits, then resigns. Raises NotLeaderError or ReconfigError.
        """
        s = self._leader_for_reconfig(now_ms)
        new = self._membership.after_remove(
            s, node_id, directory_id, self.high_watermark, self._now, self.config.fetch_timeout_ms
        )
        offset = self._append_voters(s, new)
        self._after()
        return offset

    def _election_timeout(self) -> int:
        """Randomized in [T, 2T] so that candidates rarely collide."""
        t = self.config.election_timeout_ms
        return self._now + t + self._rng.randint(0, t)

    # ============================================================== transitions

    def _persist(self, es: ElectionState) -> None:
        if es != self._election:
            if es.leader_epoch < self._election.leader_epoch:
                raise AssertionError(f"epoch going back: {self._election} -> {es}")
            self._election = es
            self._pending_election = es

    def _set_state(self, state: QuorumState) -> None:
        old = self.state
        self.state = state
        self._fetch_correlation = None
        self._snapshot_fetch = None
        if isinstance(old, Leader) and not isinstance(state, Leader):
            # Parked fetches belong to the leader: answer them with the news,
            # computed from the new state so that the fetcher learns the new
            # epoch (FENCED_LEADER_EPOCH) or that we no longer lead.
            for parked in self._purgatory.complete_all():
                self._responses.append((parked.correlation, self._fetch_error(parked.request)))

    # ================================================================== helpers

    def _send(self, destination: int, request: RaftRequest, deadline_ms: int) -> int:
        correlation = self._next_correlation
        self._next_correlation += 1
        self._inflight[correlation] = InFlight(destination, request, deadline_ms, self.state)
        self._outbox.append(Outbound(destination, request, correlation))
        return correlation

    def _respond(self, correlation: int, response: RaftResponse) -> None:
        self._responses.append((correlation, response))

    def _known_leader(self) -> int:
        lid = self.leader_id
        return NO_LEADER if lid is None else lid

    def _log_up_to_date(self, last_epoch: int, end_offset: int) -> bool:
        return (last_epoch, end_offset) >= (self._last_epoch(), self.log.end_offset)

    def _last_epoch(self) -> int:
        return log_positions.last_epoch(self.log)

    # ========================================================== inbound requests

    def handle(self, message: Any, now_ms: int, correlation: int) -> None:
        """Request or response, dispatched (the correlation is the shell's for a
        request, ours for a response)."""
        if isinstance(message, RESPONSE_TYPES):
            self.handle_response(correlation, message, now_ms)
        else:
            self.handle_request(message, now_ms, correlation)

    def handle_request(self, request: RaftRequest, now_ms: int, correlation: int) -> None:
        self._now = max(self._now, now_ms)
        if request.cluster_id != self.cluster_id:
            self._respond(correlation, error_response(request, INCONSISTENT_CLUSTER_ID, self.epoch))
            self._after()
            return
        match request:
            case FetchRequest():
                self._on_fetch(request, correlation)
            case VoteRequest():
                self._on_vote(request, correlation)
            case BeginQuorumEpochRequest():
                self._on_begin_quorum(request, correlation)
            case EndQuorumEpochRequest():
                self._on_end_quorum(request, correlation)
            case FetchSnapshotRequest():
                self._on_fetch_snapshot(request, correlation)
            case _:  # pragma: no cover - the wire codec only builds the above
                raise TypeError(f"not a Raft request: {request!r}")
        self._after()

    # --------------------------------------------------------------------- Vote

    def _on_vote(self, req: VoteRequest, correlation: int) -> None:
        # KIP-853: the voter set can differ between replicas for a while, so a
        # vote is answered whether or not the candidate (or this node) is in this
        # node's voter set: a new voter may be needed to elect a leader before it
        # has read the VotersRecord that added it. The candidate counts only its
        # own voters. What is checked is that this node is the replica the
        # candidate means (its directory id), and the log rule as always.
        if req.voter_directory_id and req.voter_directory_id != self.directory_id:
            self._respond(
                correlation,
                VoteResponse(
                    INVALID_VOTER_KEY, False, self._known_leader(), self.epoch, req.pre_vote
                ),
            )
            return
        granted = self._pre_vote(req) if req.pre_vote else self._vote(req)
        self._respond(
            correlation,
            VoteResponse(NONE, granted, self._known_leader(), self.epoch, req.pre_vote),
        )

    def _pre_vote(self, req: VoteRequest) -> bool:
        """KIP-996: grant without persisting or changing anything."""
        s = self.state
        if req.candidate_epoch <= self.epoch:
            return False  # the prospective is behind: our response tells it the epoch
        if isinstance(s, Leader):
            if req.candidate_epoch > s.epoch + 1:
                # The prospective already sits in an epoch above ours (it became a
                # candidate there and lost touch). Followers of this healthy leader
                # reject its pre-votes and it cannot go back to our epoch, so it
                # would stay out of the quorum for good: step down into its epoch,
                # as etcd's leader does when a node answers with a higher term.
                # A node merely partitioned away never gets here: without a
                # majority of pre-votes its epoch does not move.
                transitions.become_unattached(self, req.candidate_epoch - 1)
            return False
        if (
            isinstance(s, Follower)
            and s.leader_contacted
            and not s.leader_resigned
            and self._now < s.fetch_deadline_ms
        ):
            # We heard from a live leader within the fetch timeout: a node that
            # rejoins after a partition must not unseat it (whatever epoch it asks).
            return False
        if isinstance(s, Prospective) and req.candidate_epoch == s.epoch + 1:
            # Two prospectives of the same epoch. Followers of a leader that died
            # time out together (their fetch deadlines are set by the same
            # responses), so if each granted the other both would become
            # candidates and split the vote, costing an election timeout. Pre-votes
            # bind nothing, so break the tie with a total order: grant only a log
            # strictly more up to date, or an equal one from a lower node id. The
            # first in that order collects every prospective's grant; if it cannot
            # win, its rivals lose their pre-vote election, follow again and grant.
            mine = (self._last_epoch(), self.log.end_offset)
            theirs = (req.last_offset_epoch, req.last_offset)
            return theirs > mine or (theirs == mine and req.candidate_id < self.node_id)
        return self._log_up_to_date(req.last_offset_epoch, req.last_offset)

    def _vote(self, req: VoteRequest) -> bool:
        if req.candidate_epoch < self.epoch:
            return False
        if req.candidate_epoch > self.epoch:
            transitions.become_unattached(self, req.candidate_epoch)
        s = self.state
        if isinstance(s, Unattached | Prospective):
            voted = s.voted_id
            if voted is not None:
                return voted == req.candidate_id  # one vote per epoch (idempotent)
            if not self._log_up_to_date(req.last_offset_epoch, req.last_offset):
                return False
            # Persisted before the response leaves (same Ready).
            self._persist(ElectionState(s.epoch, None, req.candidate_id))
            deadline = self._election_timeout() if self._can_campaign() else None
            self._set_state(Unattached(s.epoch, req.candidate_id, deadline))
            return True
        # Candidate (voted for itself), Leader, Follower, Resigned: the vote is spent.
        return False

    def _on_vote_response(self, inf: InFlight, resp: VoteResponse) -> None:
        if transitions.maybe_learn(self, resp.leader_epoch, resp.leader_id):
            return
        s = self.state
        if inf.state is not s or resp.error != NONE:
            return
        if isinstance(s, Prospective) and resp.pre_vote:
            if (
                not resp.vote_granted
                and s.leader_id is not None
                and resp.leader_id == s.leader_id
                and resp.leader_epoch == s.epoch
            ):
                # The voter still follows the leader we lost (or that resigned: its
                # EndQuorumEpoch may not have reached that voter yet). Ask again
                # after the backoff rather than count a final no.
                s.next_send_ms[inf.destination] = self._now + self.config.retry_backoff_ms
                return
            (s.granted if resp.vote_granted else s.rejected).add(inf.destination)
            if len(s.granted & self.voters) >= self._majority():
                transitions.become_candidate(self)
        elif isinstance(s, Candidate) and not resp.pre_vote and resp.leader_epoch == s.epoch:
            (s.granted if resp.vote_granted else s.rejected).add(inf.destination)
            if len(s.granted & self.voters) >= self._majority():
                transitions.become_leader(self)

    # --------------------------------------------------------- BeginQuorumEpoch

    def _on_begin_quorum(self, req: BeginQuorumEpochRequest, correlation: int) -> None:
        if req.leader_epoch < self.epoch:
            err = FENCED_LEADER_EPOCH
        elif req.leader_epoch == self.epoch and isinstance(self.state, Leader | Resigned):
            # Two leaders in one epoch cannot happen; a stale duplicate can only
            # come from ourselves (Resigned after a restart).
            err = NONE if req.leader_id == self.node_id else FENCED_LEADER_EPOCH
        else:
            s = self.state
            if not (isinstance(s, Follower) and s.epoch == req.leader_epoch):
                transitions.become_follower(self, req.leader_epoch, req.leader_id)
            else:
                s.fetch_deadline_ms = self._now + self.config.fetch_timeout_ms
            f = self.state
            if isinstance(f, Follower):
                f.leader_contacted = True
            err = NONE
        self._respond(correlation, BeginQuorumEpochResponse(err, self._known_leader(), self.epoch))

    def _on_begin_quorum_response(self, inf: InFlight, resp: BeginQuorumEpochResponse) -> None:
        if transitions.maybe_learn(self, resp.leader_epoch, resp.leader_id):
            return
        s = self.state
        if isinstance(s, Leader) and resp.error == NONE and resp.leader_epoch == s.epoch:
            s.unacked.discard(inf.destination)

    # ----------------------------------------------------------- EndQuorumEpoch

    def _on_end_quorum(self, req: EndQuorumEpochRequest, correlation: int) -> None:
        if req.leader_epoch < self.epoch:
            self._respond(
                correlation,
                EndQuorumEpochResponse(FENCED_LEADER_EPOCH, self._known_leader(), self.epoch),
            )
            return
        if req.leader_id != self.node_id and (
            req.leader_epoch > self.epoch
            # it voted in this epoch but missed the leader's BeginQuorumEpoch: the
            # resignation names the leader, and its successor backoff applies
            or (req.leader_epoch == self.epoch and isinstance(self.state, Unattached))
        ):
            transitions.become_follower(self, req.leader_epoch, req.leader_id)
        s = self.state
        if isinstance(s, Follower) and s.leader_id == req.leader_id and self._can_campaign():
            s.leader_resigned = True
            # The best-placed successor campaigns at once, the others back off by
            # their rank; a voter not in the list waits a normal election timeout.
            # An empty list (a leader that came back Resigned after a restart knows
            # nobody's fetch offset) makes every voter campaign at once, as Kafka's
            # position-0 backoff does: waiting would only leave the quorum leaderless,
            # and pre-vote keeps the early campaign from disturbing anything.
            if not req.preferred_successors:
                delay = 0
            elif self.node_id in req.preferred_successors:
                rank = req.preferred_successors.index(self.node_id)
                delay = rank * self.config.election_timeout_ms // 2
            else:
                delay = self._election_timeout() - self._now
            s.fetch_deadline_ms = min(s.fetch_deadline_ms, self._now + delay)
        self._respond(correlation, EndQuorumEpochResponse(NONE, self._known_leader(), self.epoch))

    def _on_end_quorum_response(self, inf: InFlight, resp: EndQuorumEpochResponse) -> None:
        if transitions.maybe_learn(self, resp.leader_epoch, resp.leader_id):
            return
        s = self.state
        if isinstance(s, Resigned) and resp.error == NONE:
            s.unacked.discard(inf.destination)

    # -------------------------------------------------------------------- Fetch

    def _note_fetcher(
        self, req: FetchRequest | FetchSnapshotRequest, end_offset: int | None
    ) -> ReplicaState | None:
        """Account a fetch by the leader (`end_offset`: the fetcher's validated log end,
        None when there is none to record: diverging, or fetching a snapshot)."""
        s = self.state
        assert isinstance(s, Leader)
        return update_replica(
            s,
            self._membership,
            req,
            end_offset,
            self._now,
            self.log.end_offset,
            self.config.check_quorum_timeout_ms,
        )

    def _fetch_error(self, req: FetchRequest) -> FetchResponse:
        if req.replica_epoch < self.epoch:
            err = FENCED_LEADER_EPOCH
        elif req.replica_epoch > self.epoch:
            err = UNKNOWN_LEADER_EPOCH
        else:
            err = NOT_LEADER_OR_FOLLOWER
        lid = self.leader_id
        url = (self.endpoint(lid) or "") if lid is not None else ""
        return FetchResponse(
            err, self._known_leader(), self.epoch, log_start_offset=-1, leader_endpoint=url
        )

    def _on_fetch(self, req: FetchRequest, correlation: int) -> None:
        s = self.state
        if not isinstance(s, Leader) or req.replica_epoch != s.epoch:
            self._respond(correlation, self._fetch_error(req))
            return
        log = self.log
        start = log.start_offset
        position = log_positions.validate_fetch(log, req.fetch_offset, req.last_fetched_epoch)
        if position is log_positions.SNAPSHOT:
            # It fetches (check-quorum counts it, as Kafka's handleFetchRequest
            # does), with no offset of ours to record yet.
            self._note_fetcher(req, None)
            self._respond(correlation, self._snapshot_response(s, log.latest_snapshot_id()))
            return
        diverging = position.diverging
        replica = self._note_fetcher(req, None if diverging else req.fetch_offset)
        if diverging is not None:
            self._respond(
                correlation,
                FetchResponse(
                    NONE,
                    self.node_id,
                    s.epoch,
                    self.high_watermark,
                    start,
                    diverging_epoch=diverging,
                ),
            )
            return
        hw_moved = self._maybe_advance_hw()
        # The fetcher already knows our high watermark (or did not say): nothing
        # to tell it yet. A fetcher whose HW is behind learns ours at once.
        hw_known = req.high_watermark < 0 or req.high_watermark >= self.high_watermark
        if req.fetch_offset >= log.end_offset and req.max_wait_ms > 0 and replica is not None:
            # Nothing new: a long poll until data arrives, the HW moves, or max wait.
            deadline = self._now + min(req.max_wait_ms, self.config.fetch_max_wait_ms)
            if hw_moved or not hw_known:
                # Only HW news to tell: held for the linger, for data to ride along.
                linger = self.config.high_watermark_linger_ms
                if linger <= 0:
                    self._respond(correlation, self._fetch_data(s, req))
                    return
                deadline = min(deadline, self._now + linger)
            self._purgatory.park(req.fetch_offset, deadline, ParkedFetch(correlation, req))
            return
        self._respond(correlation, self._fetch_data(s, req))

    def _snapshot_response(self, s: Leader, snap: SnapshotId | None) -> FetchResponse:
        if snap is None:  # a log not starting at 0 always has a snapshot
            return FetchResponse(OFFSET_OUT_OF_RANGE, self.node_id, s.epoch, self.high_watermark)
        return FetchResponse(
            NONE,
            self.node_id,
            s.epoch,
            self.high_watermark,
            self.log.start_offset,
            snapshot_id=snap,
        )

    def _fetch_data(self, s: Leader, req: FetchRequest) -> FetchResponse:
        log = self.log
        offset = min(req.fetch_offset, log.end_offset)
        max_bytes = min(req.max_bytes, self.config.fetch_max_bytes)
        records = log.read(offset, max_bytes) if offset < log.end_offset else b""
        return FetchResponse(
            NONE, self.node_id, s.epoch, self.high_watermark, log.start_offset, records
        )

    def _maybe_advance_hw(self) -> bool:
        """The leader's HW: the largest offset on a majority of voters, counting its
        own log only as far as it is flushed, and only once it covers this epoch's
        first offset. Never goes back. Returns whether it moved."""
        s = self.state
        if not isinstance(s, Leader):
            return False
        ends = sorted(
            (
                self.log.flushed_offset
                if v == self.node_id and self.is_voter
                else s.voter_states[v].end_offset
                if v != self.node_id
                else -1
                for v in self.voters
            ),
            reverse=True,
        )
        candidate = ends[self._majority() - 1]
        if candidate > s.epoch_start_offset and candidate > self.high_watermark:
            self.high_watermark = candidate
            # Parked fetches answer soon so followers learn the new HW; data
            # appended before then goes with it (see high_watermark_linger_ms).
            linger = self.config.high_watermark_linger_ms
            if linger <= 0:
                self._announce_hw(s)
            elif s.hw_announce_ms is None and len(self._purgatory):
                s.hw_announce_ms = self._now + linger
            return True
        return False

    def _announce_hw(self, s: Leader) -> None:
        s.hw_announce_ms = None
        for parked in self._purgatory.complete_all():
            self._respond(parked.correlation, self._fetch_data(s, parked.request))

    def _on_fetch_response(self, inf: InFlight, corr: int, resp: FetchResponse) -> None:
        if corr != self._fetch_correlation:
            return  # a stale or duplicated answer
        self._fetch_correlation = None
        if resp.leader_endpoint and resp.leader_id >= 0:
            self._membership.learned_endpoints[resp.leader_id] = resp.leader_endpoint
        if transitions.maybe_learn(self, resp.leader_epoch, resp.leader_id):
            return
        s = self.state
        if resp.error != NONE:
            self._fetch_backoff_until = self._now + self.config.retry_backoff_ms
            if not isinstance(s, Follower):
                self._bootstrap_index += 1  # that voter does not know the leader either
            return
        if (
            not isinstance(s, Follower)
            or s.leader_id != inf.destination
            or resp.leader_epoch != s.epoch
            or inf.state is not s
        ):
            return
        s.fetch_deadline_ms = self._now + self.config.fetch_timeout_ms
        s.leader_resigned = False
        s.leader_contacted = True
        if resp.diverging_epoch is not None:
            follower_log.truncate_diverging(self, resp.diverging_epoch)
        elif resp.snapshot_id is not None:
            sid = resp.snapshot_id
            self._snapshot_fetch = SnapshotFetch(sid, s.leader_id, s.epoch, bytearray())
        elif not resp.records or follower_log.append_fetched(self, resp.records):
            follower_log.follow_high_watermark(self, resp.high_watermark)

    # ------------------------------------------------------------ FetchSnapshot

    def _on_fetch_snapshot(self, req: FetchSnapshotRequest, correlation: int) -> None:
        s = self.state
        if not isinstance(s, Leader) or req.replica_epoch != s.epoch:
            err = self._fetch_error(
                FetchRequest(req.cluster_id, req.replica_id, False, req.replica_epoch, 0, 0)
            ).error
            self._respond(correlation, FetchSnapshotResponse(err, self._known_leader(), self.epoch))
            return
        try:
            chunk, size = self.log.read_snapshot_chunk(
                req.snapshot_id,
                req.position,
                min(req.max_bytes, self.config.snapshot_chunk_bytes),
            )
        except KeyError:
            self._respond(
                correlation, FetchSnapshotResponse(SNAPSHOT_NOT_FOUND, self.node_id, s.epoch)
            )
            return
        if req.position < 0 or req.position > size:
            self._respond(
                correlation, FetchSnapshotResponse(POSITION_OUT_OF_RANGE, self.node_id, s.epoch)
            )
            return
        # A voter downloading a snapshot (megabytes, over many round trips) is
        # fetching: check-quorum must not resign the leader under it (Kafka's
        # handleFetchSnapshotRequest updates check-quorum too).
        self._note_fetcher(req, None)
        self._respond(
            correlation,
            FetchSnapshotResponse(
                NONE, self.node_id, s.epoch, req.snapshot_id, req.position, chunk, size
            ),
        )

    def _on_fetch_snapshot_response(
        self, inf: InFlight, corr: int, resp: FetchSnapshotResponse
    ) -> None:
        if corr != self._fetch_correlation:
            return
        self._fetch_correlation = None
        if transitions.maybe_learn(self, resp.leader_epoch, resp.leader_id):
            return
        sf = self._snapshot_fetch
        s = self.state
        if sf is None or not isinstance(s, Follower) or inf.state is not s:
            return
        if resp.error != NONE or resp.snapshot_id != sf.snapshot_id:
            # The snapshot went away (a newer one replaced it): fetch again.
            self._snapshot_fetch = None
            self._fetch_backoff_until = self._now + self.config.retry_backoff_ms
            return
        s.fetch_deadline_ms = self._now + self.config.fetch_timeout_ms
        s.leader_contacted = True
        if resp.position != len(sf.data):
            return
        sf.data += resp.chunk
        if len(sf.data) >= resp.size:
            follower_log.install_snapshot(self, sf)

    # ================================================================ responses

    def handle_response(self, correlation: int, response: RaftResponse, now_ms: int) -> None:
        self._now = max(self._now, now_ms)
        inf = self._inflight.pop(correlation, None)
        if inf is None:  # timed out already, or a duplicate
            self._after()
            return
        if response.error == INCONSISTENT_CLUSTER_ID:
            # A node of another cluster: its epoch and leader are not this cluster's
            # (learning them let it force an election here), so this is no answer.
            self._on_failed(correlation, inf)
            self._after()
            return
        match response:
            case FetchResponse():
                self._on_fetch_response(inf, correlation, response)
            case VoteResponse():
                self._on_vote_response(inf, response)
            case BeginQuorumEpochResponse():
                self._on_begin_quorum_response(inf, response)
            case EndQuorumEpochResponse():
                self._on_end_quorum_response(inf, response)
            case FetchSnapshotResponse():
                self._on_fetch_snapshot_response(inf, correlation, response)
        self._after()

    def request_failed(self, correlation: int, now_ms: int) -> None:
        """The request got no answer (connection refused, timeout, HTTP error)."""
        self._now = max(self._now, now_ms)
        inf = self._inflight.pop(correlation, None)
        if inf is not None:
            self._on_failed(correlation, inf)
        self._after()

    def _on_failed(self, correlation: int, inf: InFlight) -> None:
        if correlation == self._fetch_correlation:
            self._fetch_correlation = None
            self._fetch_backoff_until = self._now + self.config.retry_backoff_ms
            if not isinstance(self.state, Follower):
                self._bootstrap_index += 1  # try the next voter
        s = self.state
        if isinstance(s, Leader | Resigned | Prospective | Candidate) and inf.state is s:
            s.next_send_ms[inf.destination] = self._now + self.config.retry_backoff_ms

    # ================================================================== leader API

    def propose(self, payloads: Sequence[Any], now_ms: int) -> tuple[int, int]:
        """Append one batch per payload ((records bytes, count) or EncodedBatch-like)
        in the current epoch; returns (first offset, last offset).

        Raises NotLeaderError unless this node leads. The batches commit when
        the high watermark passes the last offset.
        """
        self._now = max(self._now, now_ms)
        s = self.state
        if not isinstance(s, Leader):
            raise NotLeaderError(self.leader_id, self.epoch)
        if not payloads:
            raise ValueError("nothing to propose")
        base = self.log.end_offset
        for entry in payloads:
            payload, count = _payload(entry)
            stamp = self._now + self.wall_offset_ms
            self.log.append(encode_payload(self.log.end_offset, s.epoch, stamp, payload, count))
        last = self.log.end_offset - 1
        self._wake_fetches()
        self._after()
        return base, last

    def propose_records(self, records: Sequence[Record], now_ms: int) -> tuple[int, int]:
        """Append `records` as one batch (atomic); returns (first offset, last offset)."""
        s = self.state
        if not isinstance(s, Leader):
            raise NotLeaderError(self.leader_id, self.epoch)
        batch = encode_batch(0, s.epoch, now_ms + self.wall_offset_ms, records)
        return self.propose([(batch[HEADER_SIZE:], len(records))], now_ms)

    def resign(self, now_ms: int) -> None:
        """Graceful shutdown: give up leadership with EndQuorumEpoch to the voters,
        preferred successors ordered by how far they have fetched."""
        self._now = max(self._now, now_ms)
        s = self.state
        if isinstance(s, Leader):
            transitions.become_resigned(self, preferred_successors(s, self.node_id))
        self._after()

    def snapshot_id_at(self, end_offset: int) -> SnapshotId:
        """The id for a snapshot of the state machine up to `end_offset` (exclusive);
        see log_positions.snapshot_id_at."""
        return log_positions.snapshot_id_at(self.log, end_offset, self.high_watermark)

    def _wake_fetches(self) -> None:
        s = self.state
        if isinstance(s, Leader):
            for parked in self._purgatory.complete_below(self.log.end_offset):
                self._respond(parked.correlation, self._fetch_data(s, parked.request))

    # ================================================================ durability

    def on_flushed(self, offset: int, now_ms: int) -> None:
        """The shell flushed the log up to `offset` (log.flushed_offset is the truth)."""
        self._now = max(self._now, now_ms)
        self._maybe_advance_hw()
        self._after()

    # ==================================================================== timers

    def tick(self, now_ms: int) -> None:
        self._now = max(self._now, now_ms)
        now = self._now
        for corr in [c for c, inf in self._inflight.items() if inf.deadline_ms <= now]:
            inf = self._inflight.pop(corr)
            self._on_failed(corr, inf)
        s = self.state
        role_of(s).on_deadline(self, s)
        self._after()

    def next_wake_ms(self) -> int:
        """When tick() must be called next (at the latest)."""
        s = self.state
        times: list[int] = [inf.deadline_ms for inf in self._inflight.values()]
        times.extend(role_of(s).deadlines(self, s))
        return max(min(times), self._now) if times else self._now + 60_000

    def _poll(self) -> None:
        """Send what the current state wants sent (its role's poll: BeginQuorumEpoch,
        EndQuorumEpoch, votes, a fetch)."""
        s = self.state
        role_of(s).poll(self, s)

    # =================================================================== output

    def _after(self) -> None:
        """Common tail of every entry point."""
        s = self.state
        if isinstance(s, Leader):
            if self._membership.removal_committed(self.high_watermark):
                # Our removal committed: hand over to the best-placed voter.
                transitions.become_resigned(self, preferred_successors(s, self.node_id))
            else:
                filled = self._membership.with_directory_ids(s, self.high_watermark)
                if filled is not None:
                    self._append_voters(s, filled)
        self._poll()

    def ready(self) -> Ready:
        """Take what has to be persisted, sent and applied since the last call."""
        r = Ready()
        if self._pending_election is not None:
            r.election_state = self._pending_election
            self._pending_election = None
        end = self.log.end_offset
        if end > self.log.flushed_offset and end > self._flush_requested:
            r.flush_to = end
            self._flush_requested = end
        elif self._flush_requested > end:
            self._flush_requested = end  # truncated: ask again when it grows
        if self._outbox:
            r.messages, self._outbox = self._outbox, []
        if self._responses:
            r.responses, self._responses = self._responses, []
        if self.high_watermark != self._reported_hw:
            r.high_watermark = self._reported_hw = self.high_watermark
        le = self.leader_and_epoch
        if le != self._reported_leader:
            r.leader_change = self._reported_leader = le
        if self._snapshot_loaded is not None:
            r.snapshot_loaded, self._snapshot_loaded = self._snapshot_loaded, None
        return r

    # ================================================================= describe

    def describe(self, now_ms: int) -> dict[str, Any]:
        """This node's view of the quorum, shaped as GET /v1/quorum (DESIGN 1.2)."""
        return describe_quorum(self, now_ms)
