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
        old_isr = () if old is None else old.isr
        new_isr = () if new is None else new.isr
        if old_isr != new_isr:
            # Only the members that change move (a fence takes one broker out of
            # 100k ISRs: the others stay put).
            for b in old_isr:
                if b not in new_isr:
                    s = self.in_isr.get(b)
                    if s is not None:
                        s.discard(key)
            for b in new_isr:
                if b not in old_isr:
                    self.in_isr.setdefault(b, set()).add(key)
        old_leader = None if old is None else old.leader
        new_leader = None if new is None else new.leader
        if old_leader != new_leader:
            if old_leader is not None:
                if old_leader >= 0:
                    self.led_by.get(old_leader, set()).discard(key)
                else:
                    self.leaderless.discard(key)
            if new_leader is not None:
                if new_leader >= 0:
                    self.led_by.setdefault(new_leader, set()).add(key)
                else:
                    self.leaderless.add(key)
        if old is not None and new is not None:
            # A change (a fence replays a million): the merge keeps the unchanged
            # fields' objects, so identity says what did not move.
            if old.elr is not new.elr:
                self._elr_changed(key, old.elr, new.elr)
            if (
                old.adding_replicas is not new.adding_replicas
                or old.removing_replicas is not new.removing_replicas
            ):
                self._reassigning_changed(key, new)
            if old_leader != new_leader or old.replicas is not new.replicas:
                self._balance_changed(key, new)
            return
        self._elr_changed(key, () if old is None else old.elr, () if new is None else new.elr)
        self._reassigning_changed(key, new)
        self._balance_changed(key, new)

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
