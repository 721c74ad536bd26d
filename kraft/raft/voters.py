"""The voter set (KIP-853): who votes, by key (node id, directory id), and where they listen.

A voter's identity is its ReplicaKey: the node id *and* the directory id written
to meta.properties when its data directory was formatted. A node that comes back
with a wiped disk has a new directory id, so it is a new replica, not the old
voter (which could otherwise help elect a leader without the committed data).

`VoterSetHistory` is what a node knows of the voter set over its log: the static
bootstrap set (from --voters; offset -1), the set a snapshot carries, and every
VotersRecord in the log by offset. The newest entry is in force as soon as it is
appended (not when it commits); truncating the log drops entries at or past the
truncation point, so the node falls back to the previous set. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from metadata_log.records import VoterEntry, VotersRecord

UNKNOWN_DIRECTORY = ""  # a static voter whose directory id is not known yet


@dataclass(frozen=True, slots=True)
class Voter:
    node_id: int
    directory_id: str
    url: str

    def matches(self, directory_id: str) -> bool:
        """Whether a replica with `directory_id` is this voter (an unknown one matches any)."""
        return self.directory_id == UNKNOWN_DIRECTORY or self.directory_id == directory_id


@dataclass(frozen=True, slots=True)
class VoterSet:
    """An immutable voter set, keyed by node id (one directory per id at a time)."""

    voters: tuple[Voter, ...]

    def __post_init__(self) -> None:
        ids = [v.node_id for v in self.voters]
        if len(set(ids)) != len(ids):
            raise ValueError(f"a node id appears twice in the voter set {sorted(ids)}")

    @classmethod
    def of(cls, voters: Iterable[Voter]) -> VoterSet:
        return cls(tuple(sorted(voters, key=lambda v: v.node_id)))

    @classmethod
    def from_record(cls, rec: VotersRecord) -> VoterSet:
        return cls.of(Voter(e.voter_id, e.directory_id, e.url) for e in rec.voters)

    def to_record(self) -> VotersRecord:
        return VotersRecord(
            tuple(VoterEntry(v.node_id, v.directory_id, v.url) for v in self.voters)
        )

    @property
    def ids(self) -> frozenset[int]:
        return frozenset(v.node_id for v in self.voters)

    def get(self, node_id: int) -> Voter | None:
        for v in self.voters:
            if v.node_id == node_id:
                return v
        return None

    def is_voter(self, node_id: int, directory_id: str) -> bool:
        v = self.get(node_id)
        return v is not None and v.matches(directory_id)

    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def with_voter(self, voter: Voter) -> VoterSet:
        return VoterSet.of([v for v in self.voters if v.node_id != voter.node_id] + [voter])

    def without(self, node_id: int) -> VoterSet:
        return VoterSet.of(v for v in self.voters if v.node_id != node_id)

    def __iter__(self) -> Iterator[Voter]:
        return iter(self.voters)

    def __len__(self) -> int:
        return len(self.voters)

    def describe(self) -> str:
        return ",".join(f"{v.node_id}:{v.directory_id or '?'}" for v in self.voters)


EMPTY = VoterSet(())


class VoterSetHistory:
    """Voter sets by the log offset of the record that set them (-1: bootstrap)."""

    def __init__(self, bootstrap: VoterSet | None) -> None:
        # (offset, set), offsets increasing. The bootstrap set sits at -1 and is
        # never truncated away; a snapshot's set sits at its end offset - 1.
        self._entries: list[tuple[int, VoterSet]] = []
        self._bootstrap = bootstrap
        if bootstrap is not None:
            self._entries.append((-1, bootstrap))

    @property
    def latest(self) -> VoterSet:
        return self._entries[-1][1] if self._entries else EMPTY

    @property
    def latest_offset(self) -> int:
        """Offset of the record the latest set came from (-1: bootstrap or none)."""
        return self._entries[-1][0] if self._entries else -1

    @property
    def from_log(self) -> bool:
        """Whether the log (or a snapshot) holds a voter set, not just the bootstrap one."""
        return bool(self._entries) and self._entries[-1][0] >= 0

    def at(self, end_offset: int) -> VoterSet:
        """The set in force for a state machine that applied everything below end_offset."""
        found = EMPTY
        for off, vs in self._entries:
            if off >= end_offset:
                break
            found = vs
        return found

    def add(self, offset: int, voters: VoterSet) -> None:
        if self._entries and offset <= self._entries[-1][0]:
            raise ValueError(f"voter set at {offset} is not after {self._entries[-1][0]}")
        self._entries.append((offset, voters))

    def truncate_from(self, offset: int) -> bool:
        """Drop sets recorded at or after `offset` (log truncation). Returns whether any went."""
        keep = [e for e in self._entries if e[0] < offset]
        changed = len(keep) != len(self._entries)
        self._entries = keep
        return changed

    def reset_to_snapshot(self, end_offset: int, voters: VoterSet | None) -> None:
        """The log was replaced by a snapshot ending at end_offset."""
        # Sets recorded in the replaced log may come from a diverged suffix: only
        # the bootstrap set and the snapshot's own survive.
        self._entries = [e for e in self._entries if e[0] < 0]
        if voters is not None:
            self._entries.append((end_offset - 1, voters))

    def entries(self) -> list[tuple[int, VoterSet]]:
        return list(self._entries)
