"""Eligible Leader Replicas (KIP-966) in the controller, through its public commands.

The scenarios follow the KIP's text and Kafka's PartitionChangeBuilderTest and
ReplicationControlManagerTest (in our own words): an ISR below
min.insync.replicas keeps the replicas it lost eligible; an eligible replica is
elected cleanly once the ISR is empty; an unclean restart (previous broker epoch
not the last one) leaves the ELR; the last known leader is elected, recovering,
when nothing else is left; a Kafka 4 cluster's own log shows the same records.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.controller.partition_change import Election, PartitionChangeBuilder, removal_change
from kraft.controller.requests import AlterConfigsRequest
from metadata_log.image import MetadataImage, PartitionRegistration
from metadata_log.records import (
    ELIGIBLE_LEADER_REPLICAS_FEATURE,
    LATEST_METADATA_VERSION,
    METADATA_VERSION_FEATURE,
    NO_LEADER,
    RECOVERED,
    RECOVERING,
    FeatureLevelRecord,
    PartitionChangeRecord,
)
from tests.unit.controller.harness import Harness


def three_replicas(elr: bool = True, min_isr: str = "2") -> Harness:
    """Brokers 1-3 and topic t: one partition [1, 2, 3], led by 1, min ISR 2."""
    h = Harness(session_timeout_ms=1000, elr=elr)
    for b in (1, 2, 3):
        h.unfenced_broker(b)
    h.create_topic("t", [[1, 2, 3]], **{"min.insync.replicas": min_isr})
    return h


def shape(h: Harness) -> tuple:
    p = h.partition("t", 0)
    return p.leader, p.isr, p.elr, p.last_known_elr


def restart(h: Harness, broker_id: int, clean: bool, now: int = 0) -> None:
    """A new incarnation registers (with its last epoch if it shut down cleanly)
    and is unfenced by its first caught-up heartbeat."""
    previous = h.c.image.brokers[broker_id].broker_epoch if clean else -1
    h.register(broker_id, now, previous_broker_epoch=previous)
    assert not h.heartbeat(broker_id, now)["is_fenced"]


def test_a_new_cluster_bootstraps_with_eligible_leader_replicas_on() -> None:
    assert Harness().c.image.features == {
        METADATA_VERSION_FEATURE: LATEST_METADATA_VERSION,
        ELIGIBLE_LEADER_REPLICAS_FEATURE: 1,
    }
    off = Harness(elr=False)
    assert ELIGIBLE_LEADER_REPLICAS_FEATURE not in off.c.image.features
    assert not off.c.elr_enabled()


def test_an_existing_log_without_the_feature_keeps_it_off() -> None:
    """An upgraded log has metadata.version but no eligible.leader.replicas.version:
    the new active controller writes nothing, and ELR stays off."""
    h = Harness(elr=False)
    assert h.c.bootstrap_records() == []
    image = MetadataImage()
    image.replay(FeatureLevelRecord(METADATA_VERSION_FEATURE, 1), 0)
    assert image.features.get(ELIGIBLE_LEADER_REPLICAS_FEATURE, 0) == 0


def test_an_isr_shrinking_below_min_isr_keeps_the_replicas_it_lost() -> None:
    h = three_replicas()
    h.alter_isr("t", 0, [1])
    assert shape(h) == (1, (1,), (2, 3), ())
    # back to min ISR: nothing needs to be remembered any more
    h.alter_isr("t", 0, [1, 2])
    assert shape(h) == (1, (1, 2), (), ())


def test_an_isr_at_min_isr_keeps_no_elr() -> None:
    h = three_replicas(min_isr="1")
    h.alter_isr("t", 0, [1])
    assert shape(h) == (1, (1,), (), ())


def test_the_last_isr_member_fenced_empties_the_isr_and_is_remembered() -> None:
    h = three_replicas()
    h.fence(3)
    h.fence(2)  # ISR [1]: below min ISR, 2 stays eligible
    assert shape(h) == (1, (1,), (2,), ())
    h.fence(1)
    # ISR empty (only with ELR on), 1 joins the ELR, and is the last known leader
    assert shape(h) == (NO_LEADER, (), (1, 2), (1,))


def test_an_eligible_replica_restarted_cleanly_is_elected_cleanly() -> None:
    """KIP-966's story: with min ISR 2 and RF 3, the ISR dies down to one member,
    then that one dies; a broker of the ELR comes back and leads, not RECOVERING."""
    h = three_replicas()
    for b in (3, 2, 1):
        h.fence(b)
    restart(h, 2, clean=True)
    leader, isr, elr, last = shape(h)
    assert (leader, isr, elr, last) == (2, (2,), (1,), ())
    assert h.partition("t", 0).leader_recovery_state == RECOVERED


def test_the_first_eligible_replica_in_replica_order_wins() -> None:
    h = three_replicas()
    h.alter_isr("t", 0, [1])  # ELR [2, 3], both unfenced
    h.fence(1)
    # ISR empty: an unfenced ELR member is elected at once, in replica order
    assert shape(h) == (2, (2,), (1, 3), ())


def test_an_isr_member_is_preferred_over_an_eligible_replica() -> None:
    """A valid leader comes from the ISR while it has any member; the ELR is only
    for an empty ISR."""
    p = PartitionRegistration((1, 2, 3), (3,), (), (), 3, 0, 4, 6, elr=(1,))
    b = PartitionChangeBuilder(p, "T", 0, lambda r: r != 3, min_isr=2, elr_enabled=True)
    assert b.set_target_isr([]).elect_leader().leader == 1  # ISR empty: ELR member 1
    b = PartitionChangeBuilder(p, "T", 0, lambda r: True, min_isr=2, elr_enabled=True)
    assert b.elect_leader().leader == 3


def test_an_unclean_restart_leaves_the_elr() -> None:
    h = three_replicas()
    for b in (3, 2, 1):
        h.fence(b)
    start = h.next_offset
    h.register(2, 0, previous_broker_epoch=-1)  # crashed: its log may lack data
    assert shape(h) == (NO_LEADER, (), (1,), (1,))
    changes = [r for r in h.records_since(start) if type(r) is PartitionChangeRecord]
    assert changes == [
        PartitionChangeRecord(h.c.image.topic_ids_by_name["t"], 0, eligible_leader_replicas=(1,))
    ]
    h.heartbeat(2, 0)  # unfenced, but neither in the ISR nor eligible: no leader
    assert shape(h) == (NO_LEADER, (), (1,), (1,))
    restart(h, 1, clean=True)
    assert shape(h) == (1, (1,), (), ())


def test_a_clean_restart_keeps_the_elr() -> None:
    h = three_replicas()
    for b in (3, 2, 1):
        h.fence(b)
    start = h.next_offset
    previous = h.c.image.brokers[2].broker_epoch
    h.register(2, 0, previous_broker_epoch=previous)
    assert [type(r).__name__ for r in h.records_since(start)] == ["RegisterBrokerRecord"]


def test_the_last_known_leader_is_elected_recovering_when_nothing_else_is_left() -> None:
    """Kafka's balanced recovery: ISR and ELR empty, the last known leader comes back
    (even after an unclean shutdown): it leads, RECOVERING, the ISR only itself."""
    h = Harness(session_timeout_ms=1000)
    h.unfenced_broker(1)
    h.unfenced_broker(2)
    h.create_topic("t", [[1]])
    h.fence(1)
    assert shape(h) == (NO_LEADER, (), (1,), (1,))
    restart(h, 1, clean=False)
    p = h.partition("t", 0)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (1, (1,), (), ())
    assert p.leader_recovery_state == RECOVERING


def test_the_last_known_leader_must_be_unfenced() -> None:
    p = PartitionRegistration((1, 2), (), (), (), NO_LEADER, 0, 4, 6, last_known_elr=(1,))
    b = PartitionChangeBuilder(p, "T", 0, lambda r: r == 2, min_isr=1, elr_enabled=True)
    assert b.elect_leader().leader == NO_LEADER and b.build() is None
    b = PartitionChangeBuilder(p, "T", 0, lambda r: True, min_isr=1, elr_enabled=True)
    assert b.elect_leader().leader == 1


def test_a_kafka_4_cluster_log_shows_the_same_three_changes() -> None:
    """tests/fixtures: a real Kafka 4 cluster (one broker, RF 1, ELR on) fenced its
    broker, which restarted uncleanly and was elected back. Our controller, told
    the same story, writes the same three PartitionChangeRecords."""
    from metadata_log.kafka.reader import iter_log
    from tests.unit.metadata_log.kafka.test_real_kafka_4x_log import LOG_DIR

    kafka = [
        r.native
        for _, batch in iter_log(LOG_DIR)
        for r in batch.records
        if r.name == "PartitionChangeRecord"
    ]
    h = Harness(session_timeout_ms=1000)
    h.unfenced_broker(1)
    h.unfenced_broker(2)
    topic_id = h.create_topic("t", [[1]])
    start = h.next_offset
    h.fence(1)
    restart(h, 1, clean=False)
    ours = [r for r in h.records_since(start) if type(r) is PartitionChangeRecord]
    from dataclasses import replace

    assert ours == [replace(r, topic_id=topic_id) for r in kafka]


def test_elr_off_needs_an_unclean_election() -> None:
    """The same story with eligible.leader.replicas.version 0: the last ISR member
    stays in the ISR and only an unclean election brings the partition back."""
    h = three_replicas(elr=False)
    for b in (3, 2, 1):
        h.fence(b)
    assert shape(h) == (NO_LEADER, (1,), (), ())
    restart(h, 2, clean=True)
    assert shape(h) == (NO_LEADER, (1,), (), ())
    h.apply(
        h.c.alter_configs(AlterConfigsRequest("t", {"unclean.leader.election.enable": "true"}), 0)
    )
    p = h.partition("t", 0)
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), RECOVERING)


def test_unregistering_a_broker_takes_it_out_of_every_elr() -> None:
    h = three_replicas()
    for b in (3, 2, 1):
        h.fence(b)
    h.apply(h.c.unregister_broker(2, 0))
    assert shape(h) == (NO_LEADER, (), (1,), (1,))
    assert 2 not in h.c.index.in_elr or not h.c.index.in_elr[2]


def test_changing_min_isr_clears_the_elr() -> None:
    h = three_replicas()
    h.alter_isr("t", 0, [1])
    assert h.partition("t", 0).elr == (2, 3)
    h.apply(h.c.alter_configs(AlterConfigsRequest("t", {"min.insync.replicas": "3"}), 0))
    assert shape(h) == (1, (1,), (), ())


def test_min_isr_is_capped_at_the_replication_factor() -> None:
    h = Harness(session_timeout_ms=1000, min_insync_replicas=5)
    for b in (1, 2):
        h.unfenced_broker(b)
    h.create_topic("t", [[1, 2]])
    assert h.c.min_isr(h.c.image.topic_by_name("t")) == 2
    h.alter_isr("t", 0, [1])
    assert h.partition("t", 0).elr == (2,)


def test_a_topic_min_isr_overrides_the_cluster_default() -> None:
    h = Harness(session_timeout_ms=1000, min_insync_replicas=2)
    for b in (1, 2, 3):
        h.unfenced_broker(b)
    h.create_topic("t", [[1, 2, 3]], **{"min.insync.replicas": "1"})
    h.alter_isr("t", 0, [1])
    assert h.partition("t", 0).elr == ()


def test_describe_shows_elr_and_last_known_elr() -> None:
    from kraft.controller.quorum_controller import partition_reply

    h = three_replicas()
    for b in (3, 2, 1):
        h.fence(b)
    reply = partition_reply("x", 0, h.partition("t", 0))
    assert reply["elr"] == [1, 2] and reply["last_known_elr"] == [1]
    assert reply["adding_replicas"] == [] and reply["removing_replicas"] == []


# ------------------------------------------------------------------ the builder's rules


@st.composite
def partitions(draw: st.DrawFn) -> tuple[PartitionRegistration, list[int], int]:
    """A partition over brokers 1-4 in any ELR state, a target ISR, a min ISR."""
    brokers = [1, 2, 3, 4]
    replicas = tuple(draw(st.permutations(brokers))[: draw(st.integers(1, 4))])
    isr = tuple(r for r in replicas if draw(st.booleans()))
    elr = tuple(sorted(r for r in replicas if r not in isr and draw(st.booleans())))
    leader = draw(st.sampled_from([NO_LEADER, *isr])) if isr else NO_LEADER
    last = draw(st.sampled_from([(), *((r,) for r in replicas)]))
    recovery = RECOVERING if len(isr) == 1 and draw(st.booleans()) else RECOVERED
    p = PartitionRegistration(replicas, isr, (), (), leader, recovery, 3, 7, elr, last)
    target = [r for r in isr if draw(st.booleans())]
    return p, target, draw(st.integers(1, 4))


@settings(max_examples=400, deadline=None, derandomize=True)
@given(data=st.data())
def test_every_change_keeps_isr_and_elr_disjoint_and_leads_from_the_isr(data) -> None:
    p, target, min_isr = data.draw(partitions())
    fenced = set(data.draw(st.lists(st.sampled_from([1, 2, 3, 4]), unique=True)))
    elr_on = data.draw(st.booleans())
    election = data.draw(st.sampled_from(list(Election)))
    rec = (
        PartitionChangeBuilder(
            p, "T", 0, lambda r: r not in fenced, min_isr=min_isr, elr_enabled=elr_on
        )
        .set_election(election)
        .set_target_isr(target)
        .build()
    )
    after = p if rec is None else p.merge(rec)
    assert not set(after.isr) & set(after.elr)
    assert set(after.elr) <= set(after.replicas)
    assert after.leader == NO_LEADER or (after.leader in after.isr and after.leader not in fenced)
    if not elr_on:
        assert after.isr or after.isr == p.isr  # without ELR the ISR never empties itself
    if elr_on and rec is not None and rec.eligible_leader_replicas:
        # kept only below min ISR, or what is left after an election from the ELR
        assert len(after.isr) < min_isr or (
            after.leader in p.elr + p.isr and after.isr == (after.leader,)
        )
    if after.leader == NO_LEADER and (not after.isr):
        assert all(r in fenced for r in after.elr)  # nobody eligible was passed over


def test_removal_change_equals_the_builder_with_elr_on_every_sampled_case() -> None:
    """The fence's fast path against the builder with ELR on: partitions of up to
    three replicas over brokers 1-4 with any ISR, ELR, last known leader and
    reassignment state, every min ISR, sampled with a seeded RNG."""
    rng = random.Random(19)
    brokers = (1, 2, 3, 4)
    checked = changed = 0
    for _ in range(30_000):
        replicas = tuple(rng.sample(brokers, rng.randint(1, 3)))
        isr = tuple(r for r in replicas if rng.random() < 0.7)
        elr = tuple(sorted(r for r in replicas if r not in isr and rng.random() < 0.3))
        leader = rng.choice((NO_LEADER, *isr))
        last = rng.choice(((), (rng.choice(replicas),)))
        adding = (replicas[-1],) if len(replicas) > 1 and rng.random() < 0.1 else ()
        removing = (replicas[0],) if len(replicas) > 1 and not adding and rng.random() < 0.1 else ()
        recovery = RECOVERING if len(isr) == 1 and rng.random() < 0.2 else RECOVERED
        p = PartitionRegistration(
            replicas, isr, removing, adding, leader, recovery, 7, 9, elr, last
        )
        removed = rng.choice(brokers)
        fenced = {b for b in brokers if rng.random() < 0.3}

        def ok(b: int, removed: int = removed, fenced: set = fenced) -> bool:
            return b != removed and b not in fenced

        unclean = rng.random() < 0.3
        min_isr = rng.randint(1, 3)
        for elr_on in (True, False):
            target = tuple(r for r in isr if r != removed)
            want = (
                PartitionChangeBuilder(p, "T", 3, ok, unclean, min_isr=min_isr, elr_enabled=elr_on)
                .set_target_isr(target)
                .build()
            )
            got = removal_change(p, "T", 3, removed, ok, unclean, min_isr, elr_on)
            assert got == want, (p, removed, fenced, unclean, min_isr, elr_on)
            checked += 1
            changed += want is not None
    assert 0 < changed < checked


@pytest.mark.parametrize("elr_on", [True, False])
def test_a_fence_of_every_isr_member_never_passes_over_an_eligible_replica(elr_on: bool) -> None:
    """Fence the brokers of a 3-replica partition one by one in every order: the
    partition is leaderless only while no unfenced broker could lead it."""
    import itertools

    for order in itertools.permutations((1, 2, 3)):
        h = three_replicas(elr=elr_on)
        for b in order:
            h.fence(b)
            p = h.partition("t", 0)
            alive = {x for x in (1, 2, 3) if not h.c.image.brokers[x].fenced}
            candidates = set(p.isr) or set(p.elr)
            if p.leader == NO_LEADER:
                assert not candidates & alive, (order, b, p)


def test_a_restart_s_partition_changes_are_drawn_in_bounded_turns() -> None:
    """A broker in many ISRs restarts uncleanly while still unfenced: the result
    holds only its RegisterBrokerRecord; the changes come from `more`, with a turn
    (None) every KEYS_PER_TURN partitions, as a fence's do."""
    from kraft.controller.quorum_controller import KEYS_PER_TURN
    from kraft.controller.requests import RegisterBrokerRequest
    from metadata_log.records import Endpoint, RegisterBrokerRecord

    h = Harness(session_timeout_ms=1000)
    for b in (1, 2):
        h.unfenced_broker(b)
    n = KEYS_PER_TURN + 5
    h.create_topic("t", [[1, 2]] * n)
    # a new process after the session expired, before any fence ran
    inc = "00000000-0000-0000-0000-00000000beef"
    req = RegisterBrokerRequest(1, "test-cluster", inc, (Endpoint("P", "h", 1),), None, ())
    result = h.c.register_broker(req, 5_000, h.next_offset)
    assert [type(r) for r in result.records] == [RegisterBrokerRecord] and result.more
    drawn = list(result.more)
    assert drawn.count(None) == 1  # n keys grouped in turns of KEYS_PER_TURN
    changes = [r for r in drawn if r is not None]
    assert len(changes) == n and all(r.isr == (2,) and r.leader == 2 for r in changes)


def test_a_removed_leader_is_demoted_when_a_reassignment_completes_without_a_successor() -> None:
    """From [0, 1] to [2, 3], led by 0: the ISR takes in 2 and 3, which cannot lead
    yet; the reassignment completes and the stopped replica 0 no longer leads."""
    p = PartitionRegistration((2, 3, 0, 1), (0, 1), (0, 1), (2, 3), 0, 0, 0, 0)
    rec = (
        PartitionChangeBuilder(p, "T", 0, lambda r: False, min_isr=2, elr_enabled=True)
        .set_target_isr([0, 1, 2, 3])
        .build()
    )
    assert rec == PartitionChangeRecord(
        "T",
        0,
        isr=(2, 3),
        leader=NO_LEADER,
        replicas=(2, 3),
        removing_replicas=(),
        adding_replicas=(),
    )


def test_a_new_isr_member_that_was_not_eligible_leaves_the_elr_alone() -> None:
    """min ISR 3, ISR [1] with ELR [3]: the leader adds 4; the ISR is still below
    min ISR, so 3 stays eligible (the last known leader is forgotten: 1 leads)."""
    p = PartitionRegistration((1, 2, 3, 4), (1,), (), (), 1, 0, 100, 200, (3,), (2,))
    b = PartitionChangeBuilder(p, "T", 0, lambda r: r != 3, min_isr=3, elr_enabled=True)
    rec = b.set_election(Election.PREFERRED).set_target_isr([1, 4]).build()
    assert rec == PartitionChangeRecord("T", 0, isr=(1, 4), last_known_elr=())
    assert p.merge(rec).elr == (3,)


def test_the_last_known_leader_waits_while_an_eligible_replica_exists() -> None:
    """ISR empty, ELR [3] (fenced), last known leader 1: nothing changes, since 3
    may come back and lead cleanly."""
    p = PartitionRegistration((1, 2, 3, 4), (), (), (), NO_LEADER, 0, 100, 200, (3,), (1,))
    b = PartitionChangeBuilder(p, "T", 0, lambda r: r != 3, min_isr=3, elr_enabled=True)
    assert b.set_election(Election.PREFERRED).set_target_isr([]).build() is None


def test_a_retried_registration_amends_it_and_keeps_the_clean_shutdown() -> None:
    """The same incarnation registering again (its first reply was lost) is Kafka's
    amended registration: the same epoch, no unclean-shutdown handling. It was a
    new epoch whose previous_broker_epoch no longer matched: the broker lost its
    ELR place and the partition went offline when the leader failed."""
    h = Harness(elr=True, min_insync_replicas=2)
    for b in (1, 2, 3):
        h.unfenced_broker(b)
    h.create_topic("t", [[1, 2, 3]])
    h.fence(3)
    clean_epoch = h.c.image.brokers[2].broker_epoch
    h.heartbeat(2, 0, want_shutdown=True)
    h.heartbeat(2, 0, want_shutdown=True)
    assert h.partition("t", 0).elr == (2,)
    inc = "00000000-0000-0000-0000-00000000abcd"
    epoch = h.register(2, 0, incarnation=inc, previous_broker_epoch=clean_epoch)
    before = len(h.log)
    assert h.register(2, 0, incarnation=inc, previous_broker_epoch=clean_epoch) == epoch
    assert len(h.log) == before + 1  # its RegisterBrokerRecord alone
    assert h.partition("t", 0).elr == (2,)
    h.heartbeat(2, 0)
    h.fence(1)
    p = h.partition("t", 0)
    assert (p.leader, p.isr) == (2, (2,))
