"""PartitionChangeBuilder: from a partition and a target, the one PartitionChangeRecord.

Kafka's PartitionChangeBuilder (4.x), step for step in `build()`:

1. complete a reassignment (KIP-455) whose adding replicas are all in the target
   ISR: replicas become the target, the removed ones leave the ISR;
2. with ELR on (KIP-966): an ISR below min.insync.replicas keeps the replicas it
   lost (and the ELR it had) as eligible leader replicas, never the ISR's own
   members nor a broker that shut down uncleanly; an ISR at min ISR clears them;
3. elect (BestLeader):
   - PREFERRED: the first replica if it is a valid leader, else as ONLINE;
   - ONLINE: keep the current leader if valid; else the first valid replica in
     replica order; "valid" is in the target ISR, or in the ELR when the ISR is
     empty (a clean election: the ISR becomes [it]), and acceptable;
   - then, with ELR on and ISR and ELR both empty, the last known leader if it is
     acceptable (Kafka's balanced recovery: ISR = [it], RECOVERING);
   - UNCLEAN: as ONLINE; if nobody qualifies, the first acceptable replica even
     out of the ISR, with ISR = [it] and leader_recovery_state RECOVERING;
   - nobody: no leader (-1);
4. bump the leader epoch when replicas are removed (their fetches are fenced);
5. write the ELR (cleared by an unclean election or with ELR off) and the ISR
   (empty only with ELR on: without it the last member stays, as Kafka 3.x);
6. last_known_elr holds the last known leader (Kafka's default
   useLastKnownLeaderInBalancedRecovery): set when the ISR becomes empty,
   cleared once the partition has a leader again.

Two deliberate differences from Kafka: the last known leader is elected only if
acceptable (Kafka checks it only for a log line), and the ELR and last known ELR
only ever name replicas of the target assignment (a replica a reassignment
removed cannot stay eligible).

"Acceptable" is the caller's predicate (unfenced, not the broker being removed,
not in controlled shutdown). A change that changes nothing is not written
(`build()` returns None). Pure: no state, no I/O.

`removal_change` is the same rule for the one change a fence makes a million
times (a broker leaves the ISR and its leaderships), without a builder per
partition where it can prove the builder would agree;
tests/unit/controller/test_partition_change.py holds it equal to the builder.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from metadata_log.image import PartitionRegistration
from metadata_log.records import (
    LEADER_RECOVERY_UNCHANGED,
    NO_LEADER,
    NO_LEADER_CHANGE,
    RECOVERING,
    PartitionChangeRecord,
    slot_constructor,
)

# PartitionChangeRecord(*its ten fields, positional), at about half the cost of
# the frozen __init__ with keywords: a fence of a broker in a million ISRs builds
# a million (removal_change). Field order: topic_id, partition_id, isr, leader,
# replicas, removing_replicas, adding_replicas, leader_recovery_state,
# eligible_leader_replicas, last_known_elr.
_change = slot_constructor(PartitionChangeRecord)


class Election(Enum):
    PREFERRED = "preferred"
    ONLINE = "online"
    UNCLEAN = "unclean"


@dataclass(frozen=True, slots=True)
class ElectionResult:
    leader: int
    unclean: bool


def isr_without(isr: Sequence[int], broker_id: int) -> tuple[int, ...]:
    """The ISR without `broker_id`; Kafka 3.x keeps the last member (no ELR)."""
    if broker_id not in isr:
        return tuple(isr)
    rest = tuple([b for b in isr if b != broker_id])
    return rest if rest else tuple(isr)


def completed_reassignment(
    replicas: Sequence[int],
    isr: Sequence[int],
    adding: Sequence[int],
    removing: Sequence[int],
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(replicas, isr) once a reassignment is complete, else None: Kafka's
    PartitionReassignmentReplicas.maybeCompleteReassignment. Complete when the ISR
    without the removed replicas is not empty and holds every remaining replica."""
    if not adding and not removing:
        return None
    new_isr = tuple(isr)
    new_replicas = tuple(replicas)
    if removing:
        new_isr = tuple([r for r in isr if r not in removing])
        new_replicas = tuple([r for r in replicas if r not in removing])
        if not new_isr or not new_replicas:
            return None
    if not set(new_replicas) <= set(new_isr):
        return None
    return new_replicas, new_isr


class PartitionChangeBuilder:
    """Collects a target for one partition, then builds the change record."""

    def __init__(
        self,
        partition: PartitionRegistration,
        topic_id: str,
        partition_id: int,
        is_acceptable_leader: Callable[[int], bool],
        unclean_enabled: bool = False,
        *,
        min_isr: int = 1,
        elr_enabled: bool = False,
    ) -> None:
        self._partition = partition
        self._topic_id = topic_id
        self._partition_id = partition_id
        self._acceptable = is_acceptable_leader
        self._election = Election.UNCLEAN if unclean_enabled else Election.ONLINE
        self._min_isr = min_isr
        self._elr_enabled = elr_enabled
        self._unclean_shutdown: tuple[int, ...] = ()
        self._target_isr: tuple[int, ...] = partition.isr
        self._target_replicas: tuple[int, ...] = partition.replicas
        self._target_removing: tuple[int, ...] = partition.removing_replicas
        self._target_adding: tuple[int, ...] = partition.adding_replicas
        self._target_elr: tuple[int, ...] = partition.elr
        self._target_recovery: int = partition.leader_recovery_state

    def set_election(self, election: Election) -> PartitionChangeBuilder:
        self._election = election
        return self

    def set_target_isr(self, isr: Sequence[int]) -> PartitionChangeBuilder:
        self._target_isr = tuple(isr)
        return self

    def set_target_replicas(self, replicas: Sequence[int]) -> PartitionChangeBuilder:
        self._target_replicas = tuple(replicas)
        return self

    def set_target_removing(self, removing: Sequence[int]) -> PartitionChangeBuilder:
        self._target_removing = tuple(removing)
        return self

    def set_target_adding(self, adding: Sequence[int]) -> PartitionChangeBuilder:
        self._target_adding = tuple(adding)
        return self

    def set_target_leader_recovery_state(self, state: int) -> PartitionChangeBuilder:
        self._target_recovery = state
        return self

    def set_unclean_shutdown_replicas(self, brokers: Sequence[int]) -> PartitionChangeBuilder:
        """Brokers that restarted after an unclean shutdown: they leave the ELR
        (KIP-966; the caller also takes them out of the target ISR)."""
        self._unclean_shutdown = tuple(brokers)
        return self

    # ---------------------------------------------------------------- steps

    def _complete_reassignment_if_needed(self) -> None:
        done = completed_reassignment(
            self._target_replicas, self._target_isr, self._target_adding, self._target_removing
        )
        if done is not None:
            self._target_replicas, self._target_isr = done
            self._target_removing = ()
            self._target_adding = ()

    def _maybe_populate_target_elr(self) -> None:
        """KIP-966: the ELR of an ISR below min ISR (Kafka's maybePopulateTargetElr)."""
        if not self._elr_enabled:
            return
        isr = self._target_isr
        if len(isr) >= self._min_isr:
            self._target_elr = ()
            return
        gone = self._unclean_shutdown
        replicas = self._target_replicas
        candidates = [
            *self._target_elr,
            *(r for r in self._partition.isr if r not in self._target_elr),
        ]
        # sorted, so the record does not depend on set order (Kafka builds a HashSet)
        self._target_elr = tuple(
            sorted(r for r in candidates if r not in isr and r not in gone and r in replicas)
        )

    def _valid(self, replica: int) -> bool:
        isr = self._target_isr
        if replica in isr:
            return self._acceptable(replica)
        # the ELR counts only with the feature on and the ISR empty
        return (
            not isr
            and self._elr_enabled
            and replica in self._target_elr
            and self._acceptable(replica)
        )

    def _last_known_leader(self) -> int:
        """The last known leader, if Kafka's balanced recovery may elect it."""
        p = self._partition
        if not self._elr_enabled or self._target_elr or self._target_isr:
            return NO_LEADER
        if len(p.last_known_elr) != 1:
            return NO_LEADER
        last = p.last_known_elr[0]
        if last not in self._target_replicas or not self._acceptable(last):
            return NO_LEADER
        return last

    def _elect(self) -> tuple[int, bool]:
        """(leader, unclean)."""
        replicas = self._target_replicas
        valid = self._valid
        if self._election is Election.PREFERRED and replicas and valid(replicas[0]):
            return replicas[0], False
        current = self._partition.leader
        if current >= 0 and valid(current):
            return current, False
        for replica in replicas:
            if valid(replica):
                return replica, False
        last = self._last_known_leader()
        if last != NO_LEADER:
            return last, True
        if self._election is Election.UNCLEAN:
            ok = self._acceptable
            for replica in replicas:
                if ok(replica):
                    return replica, True
        return NO_LEADER, False

    def elect_leader(self) -> ElectionResult:
        return ElectionResult(*self._elect())

    def _next_last_known_elr(
        self, isr: tuple[int, ...] | None, leader: int
    ) -> tuple[int, ...] | None:
        """Kafka's maybeUpdateLastKnownLeader: remember the leader the first time the
        ISR empties; forget it once the partition has (or keeps) a leader. `isr` and
        `leader` are the record's (None / NO_LEADER_CHANGE: unchanged)."""
        p = self._partition
        if not self._elr_enabled:
            return None
        if isr is not None and not isr:
            if p.leader >= 0 and p.last_known_elr != (p.leader,):
                return (p.leader,)
            return None
        if p.last_known_elr and (leader >= 0 or (p.leader != NO_LEADER and leader != NO_LEADER)):
            return ()
        return None

    # ---------------------------------------------------------------- build

    def build(self) -> PartitionChangeRecord | None:
        p = self._partition
        self._complete_reassignment_if_needed()
        self._maybe_populate_target_elr()

        leader = NO_LEADER_CHANGE
        isr: tuple[int, ...] | None = None  # set by an unclean election
        recovery = LEADER_RECOVERY_UNCHANGED
        new_leader, unclean = self._elect()
        if self._elr_enabled and new_leader >= 0 and new_leader in self._target_elr:
            # a clean election from the ELR: it alone is in sync now (also when it
            # was the leader already, which Kafka's callers never ask: they make a
            # leader they take out of the ISR unacceptable)
            self._target_isr = (new_leader,)
            self._target_elr = tuple([r for r in self._target_elr if r != new_leader])
        if new_leader != p.leader:
            leader = new_leader
            if unclean:
                # Forcibly shrink the ISR to the new leader: it must recover first.
                isr = (new_leader,)
                if p.leader_recovery_state != RECOVERING:
                    recovery = RECOVERING
        if leader == NO_LEADER_CHANGE and not set(p.replicas) <= set(self._target_replicas):
            # Replicas were removed but the leader stays: bump the leader epoch so
            # the removed replicas' fetches are fenced (Kafka's forced bump).
            leader = p.leader

        # the ELR (Kafka's maybeUpdateRecordElr, last known leader mode)
        elr: tuple[int, ...] | None = None
        target_elr = self._target_elr if isr is None and self._elr_enabled else ()
        if target_elr != p.elr:
            elr = target_elr
        target_isr = self._target_isr
        if isr is None and (target_isr or self._elr_enabled) and target_isr != p.isr:
            isr = target_isr

        last_known_elr = self._next_last_known_elr(isr, leader)
        if self._target_recovery != p.leader_recovery_state:
            recovery = self._target_recovery

        replicas = self._target_replicas
        record = PartitionChangeRecord(
            topic_id=self._topic_id,
            partition_id=self._partition_id,
            isr=isr,
            leader=leader,
            replicas=None if not replicas or replicas == p.replicas else replicas,
            removing_replicas=(
                None if self._target_removing == p.removing_replicas else self._target_removing
            ),
            adding_replicas=(
                None if self._target_adding == p.adding_replicas else self._target_adding
            ),
            leader_recovery_state=recovery,
            eligible_leader_replicas=elr,
            last_known_elr=last_known_elr,
        )
        if (
            record.isr is None
            and record.leader == NO_LEADER_CHANGE
            and record.replicas is None
            and record.removing_replicas is None
            and record.adding_replicas is None
            and record.leader_recovery_state == LEADER_RECOVERY_UNCHANGED
            and elr is None
            and last_known_elr is None
        ):
            return None
        return record


def removal_change(
    p: PartitionRegistration,
    topic_id: str,
    partition_id: int,
    broker_id: int,
    acceptable: Callable[[int], bool],
    unclean: bool,
    min_isr: int = 1,
    elr_enabled: bool = False,
) -> PartitionChangeRecord | None:
    """PartitionChangeBuilder(p, ..., acceptable, unclean, min_isr=, elr_enabled=)
    .set_target_isr(p.isr without broker_id).build(), at a fifth of the cost:
    `acceptable` must already say no for `broker_id`.

    The fast paths cover the fence's common cases, where the builder's ELR and
    reassignment steps are provably trivial: no ELR or last known leader yet, no
    reassignment, and (with ELR on) an ISR still at min ISR, or one below it whose
    leader stays (the removed broker becomes the ELR). Anything else takes the
    builder."""
    isr = p.isr
    if broker_id in isr:
        isr = tuple([b for b in isr if b != broker_id])
    pending = p.elr or p.last_known_elr or p.adding_replicas or p.removing_replicas
    if elr_enabled and len(isr) < min_isr and not pending and isr:
        leader = p.leader
        if leader >= 0 and leader in isr and acceptable(leader):
            # the ISR drops below min ISR, the leader stays: the broker leaving the
            # ISR is now eligible (the builder's rule with nothing else to decide)
            if isr is p.isr:
                return None
            return PartitionChangeRecord(
                topic_id, partition_id, isr, eligible_leader_replicas=(broker_id,)
            )
    if pending or (elr_enabled and len(isr) < min_isr):
        return (
            PartitionChangeBuilder(
                p,
                topic_id,
                partition_id,
                acceptable,
                unclean,
                min_isr=min_isr,
                elr_enabled=elr_enabled,
            )
            .set_target_isr(isr)
            .build()
        )
    if not isr:
        isr = p.isr  # without ELR the last member stays (Kafka 3.x)
    leader = p.leader
    if leader >= 0 and leader in isr and acceptable(leader):
        # the common case: the leader stays, only the ISR shrinks
        if isr is p.isr:
            return None
        return _change(
            topic_id,
            partition_id,
            isr,
            NO_LEADER_CHANGE,
            None,
            None,
            None,
            LEADER_RECOVERY_UNCHANGED,
            None,
            None,
        )
    new_leader = NO_LEADER
    for replica in p.replicas:
        if replica in isr and acceptable(replica):
            new_leader = replica
            break
    recovery = LEADER_RECOVERY_UNCHANGED
    if new_leader == NO_LEADER and unclean:
        for replica in p.replicas:
            if acceptable(replica):
                if replica != leader:
                    # as build(): the ISR becomes the new leader, which must recover
                    isr = (replica,)
                    if p.leader_recovery_state != RECOVERING:
                        recovery = RECOVERING
                new_leader = replica
                break
    changed_isr = None if isr == p.isr else isr
    if new_leader == leader:
        if changed_isr is None and recovery == LEADER_RECOVERY_UNCHANGED:
            return None
        new_leader = NO_LEADER_CHANGE
    return _change(
        topic_id, partition_id, changed_isr, new_leader, None, None, None, recovery, None, None
    )
