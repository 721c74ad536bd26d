"""ReplicationIndex: the controller's indexes over partitions, kept by replay.

Kafka's BrokersToIsrs and BrokersToElrs (which partitions a broker is in the ISR
or ELR of, which it leads, which have no leader), the partitions being
reassigned (ListPartitionReassignments without a scan) and the imbalanced ones
(leader not the first replica: the preferred-leader balancer's work list and the
preferredreplicaimbalancecount metric). The image's partition listener keeps it
current, also when the image reverts; it mirrors exactly the partitions of the
image (the simulator checks it against one rebuilt from scratch).
"""

from __future__ import annotations

from collections.abc import Sequence

from metadata_log.image import PartitionRegistration

PartitionKey = tuple[str, int]  # (topic_id, partition_id)


class ReplicationIndex:
    """Partitions by ISR member, by ELR member, by leader, and leaderless (Kafka's
    BrokersToIsrs and BrokersToElrs); the ones being reassigned; the ones whose
    leader is not their preferred replica (Kafka's imbalancedPartitions, counted
    for preferredreplicaimbalancecount).

    Kept current by the image's partition listener, also when it reverts.
    Invariant: mirrors exactly the partitions of the image.
    """

    def __init__(self) -> None:
        self.in_isr: dict[int, set[PartitionKey]] = {}
        self.in_elr: dict[int, set[PartitionKey]] = {}
        self.led_by: dict[int, set[PartitionKey]] = {}
        self.leaderless: set[PartitionKey] = set()
        self.reassigning: set[PartitionKey] = set()
        self.imbalanced: set[PartitionKey] = set()

    def partition_changed(
        self,
        topic_id: str,
        partition_id: int,
        old: PartitionRegistration | None,
        new: PartitionRegistration | None,
    ) -> None:
        key = (topic_id, partition_id)
        if old is not None and new is not None:
            # A change: the merge keeps the unchanged fields' objects, so identity
            # says what did not move.
            if old.isr is not new.isr:
                self._isr_changed(key, old.isr, new.isr)
            leader_moved = old.leader != new.leader
            if leader_moved:
                self._leader_changed(key, old.leader, new.leader)
            if old.elr is not new.elr:
                self._elr_changed(key, old.elr, new.elr)
            if (
                old.adding_replicas is not new.adding_replicas
                or old.removing_replicas is not new.removing_replicas
            ):
                self._reassigning_changed(key, new)
            if leader_moved or old.replicas is not new.replicas:
                self._balance_changed(key, new)
            return
        old_isr = () if old is None else old.isr
        new_isr = () if new is None else new.isr
        self._isr_changed(key, old_isr, new_isr)
        old_leader = None if old is None else old.leader
        new_leader = None if new is None else new.leader
        if old_leader != new_leader:
            self._leader_changed(key, old_leader, new_leader)
        self._elr_changed(key, () if old is None else old.elr, () if new is None else new.elr)
        self._reassigning_changed(key, new)
        self._balance_changed(key, new)

    def partitions_changed(
        self,
        changes: Sequence[tuple[str, int, PartitionRegistration, PartitionRegistration]],
    ) -> None:
        """`partition_changed(topic_id, partition_id, old, new)` of each change,
        with the same result, for changes of distinct partitions (MetadataImage
        publishes a transaction's so, a slice at a time). The keys are grouped by
        how they move (the same ISR shrink, the same leader move), then each group
        moves with one set operation in C: a fence of a million partitions is a
        few groups, and one call per change was most of its end's replay."""
        isr_moves: dict[tuple[tuple[int, ...], tuple[int, ...]], list[PartitionKey]] = {}
        leader_moves: dict[tuple[int, int], list[PartitionKey]] = {}
        imbalanced: list[PartitionKey] = []
        balanced: list[PartitionKey] = []
        one = self.partition_changed
        for topic_id, partition_id, old, new in changes:
            if (
                old.elr is not new.elr
                or old.adding_replicas is not new.adding_replicas
                or old.removing_replicas is not new.removing_replicas
            ):
                one(topic_id, partition_id, old, new)  # rare: no group for these
                continue
            key = (topic_id, partition_id)
            old_isr, new_isr = old.isr, new.isr
            if old_isr is not new_isr and old_isr != new_isr:
                group = isr_moves.get((old_isr, new_isr))
                if group is None:
                    isr_moves[(old_isr, new_isr)] = [key]
                else:
                    group.append(key)
            ol, nl = old.leader, new.leader
            if ol != nl:
                group = leader_moves.get((ol, nl))
                if group is None:
                    leader_moves[(ol, nl)] = [key]
                else:
                    group.append(key)
            if ol != nl or old.replicas is not new.replicas:
                # _balance_changed's rule
                if new.replicas and nl != new.replicas[0]:
                    imbalanced.append(key)
                else:
                    balanced.append(key)
        for (old_isr, new_isr), keys in isr_moves.items():
            for b in old_isr:
                if b not in new_isr:
                    s = self.in_isr.get(b)
                    if s is not None:
                        s.difference_update(keys)
            for b in new_isr:
                if b not in old_isr:
                    s = self.in_isr.get(b)
                    if s is None:
                        s = self.in_isr[b] = set()
                    s.update(keys)
        for (ol, nl), keys in leader_moves.items():
            gone = self.leaderless if ol < 0 else self.led_by.get(ol)
            if gone is not None:
                gone.difference_update(keys)
            if nl < 0:
                self.leaderless.update(keys)
            else:
                s = self.led_by.get(nl)
                if s is None:
                    s = self.led_by[nl] = set()
                s.update(keys)
        self.imbalanced.update(imbalanced)
        self.imbalanced.difference_update(balanced)

    def _isr_changed(
        self, key: PartitionKey, old_isr: tuple[int, ...], new_isr: tuple[int, ...]
    ) -> None:
        # Only the members that change move (a fence takes one broker out of
        # 100k ISRs: the others stay put).
        in_isr = self.in_isr
        for b in old_isr:
            if b not in new_isr:
                s = in_isr.get(b)
                if s is not None:
                    s.discard(key)
        for b in new_isr:
            if b not in old_isr:
                s = in_isr.get(b)
                if s is None:
                    s = in_isr[b] = set()
                s.add(key)

    def _leader_changed(self, key: PartitionKey, old: int | None, new: int | None) -> None:
        if old is not None:
            if old >= 0:
                s = self.led_by.get(old)
                if s is not None:
                    s.discard(key)
            else:
                self.leaderless.discard(key)
        if new is not None:
            if new >= 0:
                s = self.led_by.get(new)
                if s is None:
                    s = self.led_by[new] = set()
                s.add(key)
            else:
                self.leaderless.add(key)

    def _elr_changed(self, key: PartitionKey, old: tuple[int, ...], new: tuple[int, ...]) -> None:
        for b in old:
            if b not in new:
                s = self.in_elr.get(b)
                if s is not None:
                    s.discard(key)
        for b in new:
            if b not in old:
                self.in_elr.setdefault(b, set()).add(key)

    def _reassigning_changed(self, key: PartitionKey, new: PartitionRegistration | None) -> None:
        if new is not None and (new.adding_replicas or new.removing_replicas):
            self.reassigning.add(key)
        else:
            self.reassigning.discard(key)

    def _balance_changed(self, key: PartitionKey, new: PartitionRegistration | None) -> None:
        # Kafka's hasPreferredLeader: the leader is the first replica (a
        # leaderless partition counts as imbalanced too, as in Kafka's metric)
        if new is not None and new.replicas and new.leader != new.replicas[0]:
            self.imbalanced.add(key)
        else:
            self.imbalanced.discard(key)

    def leads_any(self, broker_id: int) -> bool:
        return bool(self.led_by.get(broker_id))
