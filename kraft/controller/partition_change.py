"""PartitionChangeBuilder: from a partition and a target, the one PartitionChangeRecord.

Kafka's BestLeader election (PartitionChangeBuilder.electLeader):

- ONLINE: keep the current leader if it is in the target ISR and acceptable;
  otherwise the first replica, in replica order, in the target ISR and acceptable.
- PREFERRED: the first replica if it is in the target ISR and acceptable, else as ONLINE.
- UNCLEAN: as ONLINE; if nobody qualifies, the first acceptable replica even out
  of the ISR, with ISR = [it] and leader_recovery_state RECOVERING (data may be lost).
- nobody: no leader (-1); the ISR stays as targeted.

"Acceptable" is the caller's predicate (unfenced, not the broker being removed,
not in controlled shutdown). A change that changes nothing is not written
(`build()` returns None). Pure: no state, no I/O.

`removal_change` is the same rule for the one change a fence makes a million
times (a broker leaves the ISR and its leaderships), without a builder per
partition; tests/unit/controller/test_partition_change.py holds it equal to the
builder on every small case.
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
)


class Election(Enum):
    PREFERRED = "preferred"
    ONLINE = "online"
    UNCLEAN = "unclean"


@dataclass(frozen=True, slots=True)
class ElectionResult:
    leader: int
    unclean: bool


def isr_without(isr: Sequence[int], broker_id: int) -> tuple[int, ...]:
    """The ISR without `broker_id`; Kafka 3.x keeps the last member (no ELR yet)."""
    if broker_id not in isr:
        return tuple(isr)
    rest = tuple([b for b in isr if b != broker_id])
    return rest if rest else tuple(isr)


class PartitionChangeBuilder:
    """Collects a target for one partition, then builds the change record."""

    def __init__(
        self,
        partition: PartitionRegistration,
        topic_id: str,
        partition_id: int,
        is_acceptable_leader: Callable[[int], bool],
        unclean_enabled: bool = False,
    ) -> None:
        self._partition = partition
        self._topic_id = topic_id
        self._partition_id = partition_id
        self._acceptable = is_acceptable_leader
        self._election = Election.UNCLEAN if unclean_enabled else Election.ONLINE
        self._target_isr: tuple[int, ...] = partition.isr
        self._target_replicas: tuple[int, ...] = partition.replicas
        self._target_removing: tuple[int, ...] = partition.removing_replicas
        self._target_adding: tuple[int, ...] = partition.adding_replicas
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

    # ---------------------------------------------------------------- election

    def _elect(self) -> tuple[int, bool]:
        """(leader, unclean). Runs once per partition of a fence (100k for a big
        broker): no per-replica method calls, no result object."""
        isr = self._target_isr
        ok = self._acceptable
        replicas = self._target_replicas
        if self._election is Election.PREFERRED and replicas:
            preferred = replicas[0]
            if preferred in isr and ok(preferred):
                return preferred, False
        current = self._partition.leader
        if current >= 0 and current in isr and ok(current):
            return current, False
        for replica in replicas:
            if replica in isr and ok(replica):
                return replica, False
        if self._election is Election.UNCLEAN:
            for replica in replicas:
                if ok(replica):
                    return replica, True
        return NO_LEADER, False

    def elect_leader(self) -> ElectionResult:
        return ElectionResult(*self._elect())

    # ---------------------------------------------------------------- build

    def build(self) -> PartitionChangeRecord | None:
        p = self._partition
        leader = NO_LEADER_CHANGE
        isr = self._target_isr
        recovery = self._target_recovery
        new_leader, unclean = self._elect()
        if new_leader != p.leader:
            leader = new_leader
            if unclean:
                # Forcibly shrink the ISR to the new leader: it must recover first.
                isr = (new_leader,)
                recovery = RECOVERING
        elif (
            p.leader >= 0
            and self._target_replicas != p.replicas
            and set(self._target_replicas) < set(p.replicas)
        ):
            # Replicas were removed but the leader stays: bump the leader epoch so
            # the removed replicas' fetches are fenced (Kafka's forced bump).
            leader = p.leader
        record = PartitionChangeRecord(
            topic_id=self._topic_id,
            partition_id=self._partition_id,
            isr=None if isr == p.isr else isr,
            leader=leader,
            replicas=None if self._target_replicas == p.replicas else self._target_replicas,
            removing_replicas=(
                None if self._target_removing == p.removing_replicas else self._target_removing
            ),
            adding_replicas=(
                None if self._target_adding == p.adding_replicas else self._target_adding
            ),
            leader_recovery_state=(
                LEADER_RECOVERY_UNCHANGED if recovery == p.leader_recovery_state else recovery
            ),
        )
        if (
            record.isr is None
            and record.leader == NO_LEADER_CHANGE
            and record.replicas is None
            and record.removing_replicas is None
            and record.adding_replicas is None
            and record.leader_recovery_state == LEADER_RECOVERY_UNCHANGED
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
) -> PartitionChangeRecord | None:
    """PartitionChangeBuilder(p, ..., acceptable, unclean).set_target_isr(
    isr_without(p.isr, broker_id)).build(), at a fifth of the cost: `acceptable`
    must already say no for `broker_id`."""
    isr = p.isr
    if broker_id in isr and len(isr) > 1:
        isr = tuple([b for b in isr if b != broker_id])
    leader = p.leader
    if leader >= 0 and leader in isr and acceptable(leader):
        # the common case: the leader stays, only the ISR shrinks
        return None if isr is p.isr else PartitionChangeRecord(topic_id, partition_id, isr)
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
    return PartitionChangeRecord(
        topic_id, partition_id, changed_isr, new_leader, leader_recovery_state=recovery
    )
