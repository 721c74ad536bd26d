"""Kafka's PartitionChangeBuilder cases: BestLeader, unclean fallback, no-op changes."""

from __future__ import annotations

from kraft.controller.partition_change import Election, PartitionChangeBuilder, isr_without
from metadata_log.image import PartitionRegistration
from metadata_log.records import NO_LEADER, NO_LEADER_CHANGE, RECOVERING, PartitionChangeRecord


def part(
    replicas: tuple[int, ...], isr: tuple[int, ...], leader: int, epoch: int = 5
) -> PartitionRegistration:
    return PartitionRegistration(replicas, isr, (), (), leader, 0, epoch, 10)


P = part((2, 1, 3), (2, 1, 3), leader=1)


def not3(b: int) -> bool:
    return b != 3


def builder(p: PartitionRegistration = P, unclean: bool = False) -> PartitionChangeBuilder:
    return PartitionChangeBuilder(p, "T", 0, not3, unclean)


def test_preferred_election_picks_first_replica() -> None:
    assert builder().set_election(Election.PREFERRED).elect_leader().leader == 2
    rec = builder().set_election(Election.PREFERRED).build()
    assert rec == PartitionChangeRecord("T", 0, leader=2)


def test_online_keeps_current_leader() -> None:
    assert builder().elect_leader().leader == 1
    assert builder().build() is None  # nothing changes: nothing written


def test_target_isr_without_acceptable_member_has_no_leader() -> None:
    rec = builder().set_target_isr([3]).build()
    assert rec == PartitionChangeRecord("T", 0, isr=(3,), leader=NO_LEADER)


def test_unclean_election_takes_first_acceptable_replica() -> None:
    rec = builder(unclean=True).set_target_isr([3]).build()
    assert rec == PartitionChangeRecord(
        "T", 0, isr=(2,), leader=2, leader_recovery_state=RECOVERING
    )


def test_isr_expansion_does_not_bump_leader_epoch() -> None:
    p = part((1, 2, 3), (1, 2), leader=1)
    rec = PartitionChangeBuilder(p, "T", 0, lambda b: True).set_target_isr([1, 2, 3]).build()
    assert rec == PartitionChangeRecord("T", 0, isr=(1, 2, 3))
    assert rec.leader == NO_LEADER_CHANGE
    merged = p.merge(rec)
    assert merged.leader_epoch == p.leader_epoch and merged.partition_epoch == p.partition_epoch + 1


def test_removing_replicas_forces_leader_epoch_bump() -> None:
    p = part((1, 2, 3), (1, 2, 3), leader=1)
    rec = (
        PartitionChangeBuilder(p, "T", 0, lambda b: True)
        .set_target_replicas([1, 2])
        .set_target_isr([1, 2])
        .build()
    )
    assert rec is not None and rec.leader == 1
    assert p.merge(rec).leader_epoch == p.leader_epoch + 1


def test_fencing_two_brokers_shrinks_isrs_and_moves_leaders() -> None:
    """Partitions [1,2,3], [2,3,4], [0,2,1] with brokers 2 and 3 fenced."""
    fenced = {2, 3}
    parts = [part(r, r, r[0]) for r in [(1, 2, 3), (2, 3, 4), (0, 2, 1)]]
    for broker in (2, 3):
        for i, p in enumerate(parts):
            rec = (
                PartitionChangeBuilder(p, "T", i, lambda b: b not in fenced)
                .set_target_isr(isr_without(p.isr, broker))
                .build()
            )
            if rec is not None:
                parts[i] = p.merge(rec)
    assert [p.isr for p in parts] == [(1,), (4,), (0, 1)]
    assert [p.leader for p in parts] == [1, 4, 0]
    assert all(p.leader not in fenced for p in parts)


def test_last_isr_member_is_kept_when_fenced() -> None:
    assert isr_without((3,), 3) == (3,)
    assert isr_without((1, 3), 3) == (1,)
    assert isr_without((1, 2), 3) == (1, 2)


def test_controlled_shutdown_of_leader() -> None:
    """A broker leading [0,1,2] enters controlled shutdown: ISR [1,2], leader 1."""
    p = part((0, 1, 2), (0, 1, 2), leader=0)
    rec = (
        PartitionChangeBuilder(p, "T", 0, lambda b: b != 0)
        .set_target_isr(isr_without(p.isr, 0))
        .build()
    )
    assert rec == PartitionChangeRecord("T", 0, isr=(1, 2), leader=1)


def test_removal_change_equals_the_builder_on_every_small_case() -> None:
    """The fence's fast path is the builder's rule: every partition of up to three
    replicas over brokers 1-4 (any ISR order, any leader, either recovery state),
    every removed broker, every set of fenced brokers, clean and unclean."""
    import itertools

    from kraft.controller.partition_change import removal_change

    brokers = (1, 2, 3, 4)
    checked = changed = 0
    for rf in (1, 2, 3):
        for replicas in itertools.permutations(brokers, rf):
            isrs = [isr for n in range(1, rf + 1) for isr in itertools.permutations(replicas, n)]
            for isr, leader, recovery in itertools.product(isrs, (-1, *replicas), (0, 1)):
                p = PartitionRegistration(replicas, isr, (), (), leader, recovery, 7, 9)
                for removed, fenced in itertools.product(brokers, range(16)):

                    def ok(b: int, removed: int = removed, fenced: int = fenced) -> bool:
                        return b != removed and not fenced >> (b - 1) & 1

                    for unclean in (False, True):
                        want = (
                            PartitionChangeBuilder(p, "T", 3, ok, unclean)
                            .set_target_isr(isr_without(p.isr, removed))
                            .build()
                        )
                        assert removal_change(p, "T", 3, removed, ok, unclean) == want, (
                            p,
                            removed,
                            fenced,
                            unclean,
                        )
                        checked += 1
                        changed += want is not None
    assert checked > 100_000 and 0 < changed < checked
