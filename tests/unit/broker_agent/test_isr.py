"""ISR dynamics of a partition leader against the real pure controller, fake clock."""

from __future__ import annotations

import random

from broker_agent.follower import LeaderIndex
from broker_agent.isr import AlterSend, IsrConfig, IsrManager
from kraft.controller.errors import ApiError
from kraft.controller.requests import AlterPartitionRequest
from tests.unit.controller.harness import Harness


class Cluster:
    """A controller with brokers 1..4 unfenced and topic t: [1,2,3] x 2 partitions."""

    def __init__(self) -> None:
        self.h = Harness()
        self.epochs = {b: self.h.unfenced_broker(b) for b in (1, 2, 3, 4)}
        self.topic_id = self.h.create_topic("t", [[1, 2, 3], [1, 3, 2]])
        self.index = LeaderIndex()
        self.index.rebuild(self.h.c.image)
        self.errors: list[str] = []

    @property
    def image(self):  # noqa: ANN201
        return self.h.c.image

    def led(self, broker: int):  # noqa: ANN201
        self.index.rebuild(self.image)
        return self.index.leads(broker)

    def send(self, mgr: IsrManager, s: AlterSend, now: int) -> None:
        try:
            res = self.h.apply(self.h.c.alter_partition(AlterPartitionRequest.parse(s.body), now))
        except ApiError as e:
            self.errors.append(e.code)
            mgr.on_error(s.request_id, e.code, now)
            return
        mgr.on_response(s.request_id, res.reply, now)

    def step(self, mgr: IsrManager, now: int, active: bool = True) -> list[AlterSend]:
        sends = mgr.poll(self.image, self.led(1), self.epochs[1], active, now)
        for s in sends:
            self.send(mgr, s, now)
        return sends

    def shrink_isr_by_fencing(self, broker: int, now: int) -> None:
        """Fence `broker` the way a session expiry does (removes it from ISRs)."""
        res = self.h.c.maybe_fence_stale_broker(now + 100_000)
        self.h.apply(res)

    def fence_3(self) -> None:
        """Broker 3 misses heartbeats (the others' last is at 8 000) and is fenced:
        it leaves the ISRs."""
        for b in (1, 2, 4):
            self.h.heartbeat(b, 8000)
        self.shrink_isr_by_fencing(3, 0)

    def fence_and_unfence_3(self) -> None:
        """fence_3, then broker 3 heartbeats at 10 000: unfenced, alive, out of the ISRs."""
        self.fence_3()
        self.h.heartbeat(3, 10_000)


def manager(**over) -> IsrManager:  # noqa: ANN003
    return IsrManager(1, IsrConfig(**over), random.Random(3))


def test_nothing_to_do_with_a_full_isr() -> None:
    c = Cluster()
    mgr = manager()
    for t in range(0, 10_000, 500):
        assert c.step(mgr, t) == []


def test_expands_a_caught_up_replica_back() -> None:
    c = Cluster()
    p0 = c.h.partition("t", 0)
    c.fence_3()
    assert c.image.brokers[3].fenced
    assert 3 not in c.h.partition("t", 0).isr
    mgr = manager(catch_up_ms=1000)
    assert c.step(mgr, 10_000) == []  # fenced: not alive
    c.h.heartbeat(3, 10_000)  # unfenced again
    assert not c.image.brokers[3].fenced
    assert c.step(mgr, 10_100) == []  # alive, but not yet caught up
    sends = c.step(mgr, 11_100)
    assert {s.reason for s in sends} == {"expand"}
    p = c.h.partition("t", 0)
    assert 3 in p.isr and p.partition_epoch > p0.partition_epoch
    body = sends[0].body
    assert body["broker_epoch"] == c.epochs[1]
    assert {m["broker_id"]: m["broker_epoch"] for m in body["new_isr_with_epochs"]}[3] == (
        c.image.brokers[3].broker_epoch
    )
    assert c.errors == []
    assert mgr.expansions == len(sends)


def test_a_restarted_replica_starts_catching_up_again() -> None:
    c = Cluster()
    c.fence_3()
    mgr = manager(catch_up_ms=1000)
    c.h.heartbeat(3, 10_000)
    c.step(mgr, 10_000)  # sees epoch E alive since 10 000
    # broker 3 restarts: a new process (a new incarnation, registered once the old
    # one's 9 s session is over) and a new epoch, fenced at first
    c.epochs[3] = c.h.register(3, 19_500)
    c.h.heartbeat(3, 19_600)
    assert c.step(mgr, 20_100) == []  # the new epoch is alive only since 20 100
    assert {s.reason for s in c.step(mgr, 21_200)} == {"expand"}


def test_does_nothing_unless_running_and_caught_up_with_itself() -> None:
    c = Cluster()
    c.fence_and_unfence_3()
    mgr = manager(catch_up_ms=0)
    assert c.step(mgr, 20_000, active=False) == []
    # an image that does not yet hold our registration epoch: wait
    assert mgr.poll(c.image, c.led(1), c.epochs[1] + 1000, True, 20_000) == []
    assert c.step(mgr, 20_000) != []


def test_lag_model_is_off_by_default() -> None:
    c = Cluster()
    mgr = manager()
    for t in range(0, 120_000, 1000):
        c.step(mgr, t)
    assert mgr.shrinks == 0 and all(len(c.h.partition("t", i).isr) == 3 for i in (0, 1))


def test_lag_model_shrinks_and_expansion_brings_them_back() -> None:
    c = Cluster()
    mgr = manager(lag_probability=0.3, check_interval_ms=1000, lag_min_ms=2000, lag_max_ms=4000)
    sizes = []
    for t in range(0, 60_000, 250):
        c.step(mgr, t)
        sizes.append(min(len(c.h.partition("t", i).isr) for i in (0, 1)))
    assert mgr.shrinks > 0 and mgr.expansions > 0
    assert min(sizes) < 3
    assert c.errors == []
    # the leader never shrinks itself out
    assert all(1 in c.h.partition("t", i).isr for i in (0, 1))
    # after the lag windows end and no more checks happen, ISRs are whole again
    mgr2 = IsrManager(1, IsrConfig(lag_probability=0.0), random.Random(0))
    for t in range(60_000, 80_000, 500):
        c.step(mgr2, t)
    assert all(len(c.h.partition("t", i).isr) == 3 for i in (0, 1))


def test_lag_model_is_deterministic_for_a_seed() -> None:
    def run(seed: int) -> list[tuple[int, str, tuple[int, ...]]]:
        c = Cluster()
        mgr = IsrManager(1, IsrConfig(lag_probability=0.3), random.Random(seed))
        out = []
        for t in range(0, 30_000, 500):
            for s in c.step(mgr, t):
                out.append(
                    (t, s.reason, tuple(m["broker_id"] for m in s.body["new_isr_with_epochs"]))
                )
        return out

    assert run(11) == run(11)
    assert run(11) != run(12)


def test_one_request_per_partition_and_bounded_in_flight() -> None:
    c = Cluster()
    c.fence_and_unfence_3()
    mgr = manager(catch_up_ms=0, max_in_flight=1)
    sends = mgr.poll(c.image, c.led(1), c.epochs[1], True, 10_000)
    assert len(sends) == 1
    # unanswered: nothing more until it times out
    assert mgr.poll(c.image, c.led(1), c.epochs[1], True, 10_500) == []
    assert mgr.in_flight == 1
    later = mgr.poll(c.image, c.led(1), c.epochs[1], True, 10_000 + mgr.config.request_timeout_ms)
    assert mgr.errors == 1
    # the timed-out partition backs off; the other one gets its turn
    assert [s.key for s in later] != [sends[0].key] and len(later) == 1
    wake = mgr.next_wake_ms()
    assert wake is not None and wake > 12_000


def test_stale_partition_epoch_waits_for_the_image() -> None:
    c = Cluster()
    c.fence_and_unfence_3()
    mgr = manager(catch_up_ms=0, retry_backoff_ms=100)
    stale = c.image.copy()
    # the controller moves on (another expansion) while our image stays behind
    sends = mgr.poll(c.image, c.led(1), c.epochs[1], True, 10_000)
    for s in sends:
        c.send(mgr, s, 10_000)
    mgr2 = manager(catch_up_ms=0, retry_backoff_ms=100)
    index = LeaderIndex()
    index.rebuild(stale)
    sends = mgr2.poll(stale, index.leads(1), c.epochs[1], True, 10_000)
    assert sends
    for s in sends:
        c.send(mgr2, s, 10_000)
    assert set(c.errors) == {"INVALID_UPDATE_VERSION"}
    # with the same stale image it does not retry, even after the backoff
    assert mgr2.poll(stale, index.leads(1), c.epochs[1], True, 11_000) == []


def _change(c: Cluster, topic_id: str, pid: int, **fields) -> None:  # noqa: ANN003
    from kraft.controller.quorum_controller import ControllerResult
    from metadata_log.records import PartitionChangeRecord

    c.h.apply(ControllerResult((PartitionChangeRecord(topic_id, pid, **fields),)))


def test_a_replica_added_by_a_reassignment_joins_the_isr_only_after_copying_the_log() -> None:
    c = Cluster()
    _change(c, c.topic_id, 0, replicas=(1, 2, 3, 4), adding_replicas=(4,))
    mgr = manager(catch_up_ms=1000)
    assert c.step(mgr, 5_000) == []  # broker 4 seen alive from now
    # alive long enough to be a caught-up follower, but it only starts copying now
    assert c.step(mgr, 6_000) == []
    assert c.step(mgr, 6_900) == []
    sends = c.step(mgr, 7_000)
    assert [s.reason for s in sends] == ["expand"]
    assert 4 in c.h.partition("t", 0).isr and c.errors == []


def test_strict_min_isr_holds_the_high_watermark_below_min_insync_replicas() -> None:
    c = Cluster()
    m = c.h.create_topic("m", [[1, 2, 3]], 0, **{"min.insync.replicas": "2"})
    mgr = manager(check_interval_ms=1000, expansion_enabled=False)
    for t in (0, 1000):
        c.step(mgr, t)
    assert mgr.logs[(m, 0)] == [2, 2] and mgr.under_min_isr == 0
    _change(c, m, 0, isr=(1,))  # the followers fell out: one member, min ISR 2
    _change(c, c.topic_id, 0, isr=(1,))  # topic t keeps the default min ISR 1
    for t in (2000, 3000):
        c.step(mgr, t)
    assert mgr.logs[(m, 0)] == [4, 2]  # written, not committed
    assert mgr.logs[(c.topic_id, 0)] == [4, 4]
    assert mgr.under_min_isr == 1
    _change(c, m, 0, isr=(1, 2))
    c.step(mgr, 4000)
    assert mgr.logs[(m, 0)] == [5, 5] and mgr.under_min_isr == 0


def test_a_recovering_leader_marks_its_partition_recovered_then_expands() -> None:
    c = Cluster()
    # an unclean election left broker 1 leading alone, RECOVERING (KIP-704)
    _change(c, c.topic_id, 0, isr=(1,), leader_recovery_state=1)
    mgr = manager(catch_up_ms=0)
    sends = c.step(mgr, 1000)
    recover = [s for s in sends if s.key == (c.topic_id, 0)]
    assert [s.reason for s in recover] == ["recover"]
    assert recover[0].body["leader_recovery_state"] == 0
    assert [m["broker_id"] for m in recover[0].body["new_isr_with_epochs"]] == [1]
    p = c.h.partition("t", 0)
    assert p.leader_recovery_state == 0 and p.isr == (1,) and c.errors == []
    assert mgr.recoveries == 1
    c.step(mgr, 2000)  # then the followers join as usual
    assert set(c.h.partition("t", 0).isr) == {1, 2, 3}
