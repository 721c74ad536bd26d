"""KIP-853 membership: which voter set is in force, and whether a change may be made.

The core asks this module questions (is this node a voter, may it campaign,
is a change pending, what set would an AddVoter / RemoveVoter produce) and acts
on the answers, as etcd-io/raft keeps `tracker/` and `confchange/` apart from
`raft.go`. Nothing here does I/O beyond reading the log it is given at start-up.

A voter is a key (node id, directory id). The set lives in the log as
VotersRecord control records (the first leader of a quorum bootstrapped from a
static list writes it) and in snapshots; each node uses the newest set in its
log as soon as it is appended and falls back to the previous one when that
record is truncated. Changes are one voter at a time, only once the leader has
committed an offset of its own epoch and no other change is uncommitted, which
keeps every majority of the old set overlapping every majority of the new one.
A leader that removes itself keeps leading (not counting itself) until the
change commits, then resigns.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from kraft.raft.errors import (
    CONCURRENT_VOTER_CHANGE,
    DUPLICATE_VOTER,
    INVALID_VOTER_CHANGE,
    LEADER_NOT_READY,
    VOTER_NOT_CAUGHT_UP,
    VOTER_NOT_FOUND,
    ReconfigError,
)
from kraft.raft.replicated_log import ReplicatedLog
from kraft.raft.state import Leader, ReplicaState
from kraft.raft.voters import UNKNOWN_DIRECTORY, Voter, VoterSet, VoterSetHistory
from metadata_log.batch import decode_records, iter_headers
from metadata_log.errors import MetadataLogError
from metadata_log.records import VotersRecord
from metadata_log.snapshot import SnapshotId, snapshot_voters

# How much of a snapshot's head is read to find its voter set.
_SNAPSHOT_HEAD_BYTES = 64 * 1024
# How much of the log is read per step when scanning it for voter sets at start-up.
_SCAN_BYTES = 8 * 1024 * 1024


def as_voter_set(voters: Iterable[int] | VoterSet | None) -> VoterSet | None:
    """A bootstrap voter set from controller.quorum.voters (ids only) or a VoterSet."""
    if voters is None or isinstance(voters, VoterSet):
        return voters
    return VoterSet.of(Voter(v, UNKNOWN_DIRECTORY, "") for v in voters)


class Membership:
    """This node's view of the voter set: its history in the log, the set in force,
    and the rules a change must pass."""

    def __init__(
        self,
        node_id: int,
        directory_id: str,
        bootstrap: VoterSet | None,
        bootstrap_servers: Sequence[int],
    ) -> None:
        self.node_id = node_id
        self.directory_id = directory_id
        self.bootstrap_servers = tuple(bootstrap_servers)
        if (bootstrap is None or not len(bootstrap)) and not self.bootstrap_servers:
            raise ValueError("the voter set is empty and there are no bootstrap servers")
        self.history = VoterSetHistory(
            bootstrap if bootstrap is not None and len(bootstrap) else None
        )
        # URLs of leaders named in fetch answers (a node that knows no voter set yet).
        self.learned_endpoints: dict[int, str] = {}
        self.voter_set: VoterSet = self.history.latest
        self.voters: frozenset[int] = self.voter_set.ids
        self.is_voter = self.voter_set.is_voter(node_id, directory_id)
        self.version = 0  # bumped on every change of the voter set in force

    # ------------------------------------------------------------------ history

    def load(self, log: ReplicatedLog) -> None:
        """The voter sets of the snapshot and of every VotersRecord in the log."""
        snap = log.latest_snapshot_id()
        if snap is not None:
            vs = self.read_snapshot_voters(log, snap)
            if vs is not None:
                self.history.reset_to_snapshot(snap.end_offset, vs)
        offset = log.start_offset
        while offset < log.end_offset:
            data = log.read(offset, _SCAN_BYTES)
            if not data:
                break
            for pos, h in iter_headers(data, "<log>"):
                if h.control:
                    self.note_control_batch(data, pos, h)
                offset = h.next_offset

    @staticmethod
    def read_snapshot_voters(log: ReplicatedLog, snap: SnapshotId) -> VoterSet | None:
        try:
            head, _size = log.read_snapshot_chunk(snap, 0, _SNAPSHOT_HEAD_BYTES)
            rec = snapshot_voters(head)
        except (KeyError, MetadataLogError):
            return None  # a snapshot written without a voter set (or not a batch file)
        return None if rec is None else VoterSet.from_record(rec)

    def note_control_batch(self, data: bytes, pos: int, header: Any) -> bool:
        """Record the VotersRecords of a control batch just appended; True if any."""
        found = False
        for i, rec in enumerate(decode_records(data, pos, header, "<log>")):
            # A record the snapshot already covers (a log kept below it) is older
            # than the snapshot's set.
            if (
                isinstance(rec, VotersRecord)
                and header.base_offset + i > self.history.latest_offset
            ):
                self.history.add(header.base_offset + i, VoterSet.from_record(rec))
                found = True
        return found

    def refresh(self) -> bool:
        """Put the newest voter set in force; True when that changed anything."""
        vs = self.history.latest
        is_voter = vs.is_voter(self.node_id, self.directory_id)
        if vs == self.voter_set and self.is_voter == is_voter:
            return False
        self.version += 1
        self.voter_set = vs
        self.voters = vs.ids
        self.is_voter = is_voter
        return True

    # ---------------------------------------------------------------- questions

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def can_campaign(self, high_watermark: int) -> bool:
        """A voter of the newest set, or of the set before it while the newest is
        not known to be committed.

        A leader that appended its own removal and lost its leadership before
        the change committed (a crash, say) is no voter by its newest set, yet
        the others may still need its vote, and its log, holding the change, is
        ahead of theirs, so it must refuse them: with two voters nobody could
        ever be elected. Kafka's removed leader leads until the change commits;
        so this node campaigns (among the newest set's voters, its own vote not
        counting), leads until the change commits, then hands over.
        """
        if self.is_voter:
            return True
        h = self.history
        latest = h.latest_offset
        if latest < 0 or latest < high_watermark:
            return False
        return h.at(latest).is_voter(self.node_id, self.directory_id)

    def pending_change(self, high_watermark: int) -> int | None:
        """Offset of an uncommitted VotersRecord, if any."""
        off = self.history.latest_offset
        return off if off >= high_watermark else None

    def removal_committed(self, high_watermark: int) -> bool:
        """This leader's own removal has committed: time to hand over."""
        return not self.is_voter and high_watermark > self.history.latest_offset

    def endpoint(self, node_id: int) -> str | None:
        """The URL of `node_id` as this node knows it (voter set, or learned from a leader)."""
        v = self.voter_set.get(node_id)
        if v is not None and v.url:
            return v.url
        for _off, vs in reversed(self.history.entries()):
            v = vs.get(node_id)
            if v is not None and v.url:
                return v.url
        return self.learned_endpoints.get(node_id)

    def voters_record_at(self, end_offset: int) -> VotersRecord | None:
        """The voter set in force for a snapshot ending at `end_offset` (for its writer)."""
        vs = self.history.at(end_offset)
        return vs.to_record() if len(vs) else None

    def bootstrap_to_write(self) -> VoterSet | None:
        """KIP-853: the set a new leader writes into the log when the log holds none
        yet (a quorum bootstrapped from a static list), with its own directory id,
        so that the set is replicated and can then be changed."""
        if self.history.from_log:
            return None
        return VoterSet.of(
            Voter(v.node_id, self.directory_id, v.url)
            if v.node_id == self.node_id and not v.directory_id
            else v
            for v in self.voter_set
        )

    # ----------------------------------------------------------- reconfiguration

    def check_ready(self, s: Leader, high_watermark: int) -> None:
        """The rules every change passes first: the leader committed an offset of its
        epoch, and no other change is uncommitted."""
        if high_watermark <= s.epoch_start_offset:
            raise ReconfigError(
                LEADER_NOT_READY,
                f"the leader has not committed an offset of its epoch {s.epoch} yet "
                f"(high watermark {high_watermark}, epoch start {s.epoch_start_offset})",
                retriable=True,
            )
        pending = self.pending_change(high_watermark)
        if pending is not None:
            raise ReconfigError(
                CONCURRENT_VOTER_CHANGE,
                f"a voter change (VotersRecord at offset {pending}) is not committed yet: "
                "one change at a time; retry once it commits",
            )

    @staticmethod
    def check_new_voter(voter: Voter) -> None:
        """An AddVoter names the new voter's directory id and URL."""
        if not voter.directory_id:
            raise ReconfigError(INVALID_VOTER_CHANGE, "directory_id is required to add a voter")
        if not voter.url:
            raise ReconfigError(INVALID_VOTER_CHANGE, "the new voter's url is required")

    def after_add(
        self,
        s: Leader,
        voter: Voter,
        high_watermark: int,
        now_ms: int,
        fetch_timeout_ms: int,
        log_end_offset: int,
    ) -> VoterSet:
        """The voter set an AddVoter produces, or ReconfigError: the new voter must be
        a replica fetching from this leader with that directory id, caught up (at
        the log end within the fetch timeout)."""
        node_id, directory_id = voter.node_id, voter.directory_id
        self.check_new_voter(voter)
        self.check_ready(s, high_watermark)
        cur = self.voter_set.get(node_id)
        if cur is not None:
            if cur.directory_id == directory_id:
                raise ReconfigError(
                    DUPLICATE_VOTER, f"node {node_id} (directory {directory_id}) is already a voter"
                )
            raise ReconfigError(
                DUPLICATE_VOTER,
                f"node {node_id} is a voter with directory {cur.directory_id or '(unknown)'}: "
                "remove that voter first",
            )
        # Another voter's URL would have the quorum dial that voter for this one:
        # when the real one is needed for a majority, no leader can be elected.
        for v in self.voter_set:
            if v.url and v.url == voter.url:
                raise ReconfigError(
                    INVALID_VOTER_CHANGE,
                    f"{voter.url} is voter {v.node_id}'s URL; give node {node_id}'s own "
                    "listener (its --listen)",
                )
        r = s.observer_states.get(node_id)
        if r is None or r.directory_id != directory_id:
            raise ReconfigError(
                VOTER_NOT_CAUGHT_UP,
                f"node {node_id} with directory {directory_id} is not fetching from the "
                "leader: start it (kraft controller --bootstrap-controllers ...) first",
                retriable=True,
            )
        if r.last_caught_up_ms < 0 or now_ms - r.last_caught_up_ms > fetch_timeout_ms:
            raise ReconfigError(
                VOTER_NOT_CAUGHT_UP,
                f"node {node_id} has not caught up with the leader (fetch offset "
                f"{r.end_offset}, leader log end {log_end_offset})",
                retriable=True,
            )
        return self.voter_set.with_voter(voter)

    def after_remove(
        self,
        s: Leader,
        node_id: int,
        directory_id: str,
        high_watermark: int,
        now_ms: int,
        fetch_timeout_ms: int,
    ) -> VoterSet:
        """The voter set a RemoveVoter produces (id and, when given, directory id must
        match), or ReconfigError. Removing the leader itself is allowed; leaving
        voters of which no majority is live (this leader, or fetching within the
        fetch timeout) is not: they could neither commit the change nor elect."""
        self.check_ready(s, high_watermark)
        cur = self.voter_set.get(node_id)
        if cur is None or (
            directory_id
            and cur.directory_id != UNKNOWN_DIRECTORY
            and cur.directory_id != directory_id
        ):
            raise ReconfigError(
                VOTER_NOT_FOUND,
                f"no voter ({node_id}, {directory_id or 'any directory'}); "
                f"the voters are {self.voter_set.describe()}",
            )
        if len(self.voter_set) == 1:
            raise ReconfigError(INVALID_VOTER_CHANGE, "cannot remove the only voter")
        left = self.voter_set.without(node_id)

        def live(vid: int) -> bool:
            if vid == self.node_id:
                return True
            r = s.voter_states.get(vid)
            return (
                r is not None
                and r.last_fetch_ms >= 0
                and now_ms - r.last_fetch_ms <= fetch_timeout_ms
            )

        ids = sorted(v.node_id for v in left)
        up = [v for v in ids if live(v)]
        if len(up) < len(ids) // 2 + 1:
            down = [v for v in ids if v not in up]
            raise ReconfigError(
                INVALID_VOTER_CHANGE,
                f"removing voter {node_id} would leave voters {ids}, of which only "
                f"{len(up)} {up} fetch from the leader: no majority to commit the change "
                f"or elect a leader. Bring {down} back first (or remove a voter that is down)",
            )
        return left

    def with_directory_ids(self, s: Leader, high_watermark: int) -> VoterSet | None:
        """A quorum bootstrapped from a static list knows no directory ids: the
        leader records each voter's as it learns it (its own, then from voters'
        fetches), one VotersRecord at a time under the same rules as a change.
        The set to append, or None when there is nothing to fill or it may not yet."""
        if self.pending_change(high_watermark) is not None:
            return None
        if high_watermark <= s.epoch_start_offset:
            return None
        filled = []
        changed = False
        for v in self.voter_set:
            d = v.directory_id
            if d == UNKNOWN_DIRECTORY:
                if v.node_id == self.node_id:
                    d = self.directory_id
                else:
                    r = s.voter_states.get(v.node_id)
                    d = r.directory_id if r is not None else UNKNOWN_DIRECTORY
            if d != v.directory_id:
                changed = True
            filled.append(Voter(v.node_id, d, v.url))
        return VoterSet.of(filled) if changed else None

    def move_replicas(self, s: Leader) -> None:
        """A leader's replica progress after the set in force changed: progress moves
        between the voter and observer tables; a replica whose directory id is not
        the voter's starts afresh (it never counted)."""
        voters = self.voters
        for vid in list(s.voter_states):
            if vid not in voters:
                r = s.voter_states.pop(vid)
                s.observer_states.setdefault(vid, r)
                s.unacked.discard(vid)
        for v in self.voter_set:
            if v.node_id in s.voter_states:
                r = s.voter_states[v.node_id]
                if v.node_id != self.node_id and not v.matches(r.directory_id):
                    s.voter_states[v.node_id] = ReplicaState(v.node_id)
                continue
            obs = s.observer_states.get(v.node_id)
            if obs is not None and v.matches(obs.directory_id):
                s.voter_states[v.node_id] = s.observer_states.pop(v.node_id)
            else:
                s.voter_states[v.node_id] = ReplicaState(v.node_id, directory_id=v.directory_id)
        s.fetched_since_check &= voters
