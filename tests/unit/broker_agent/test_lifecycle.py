"""The broker lifecycle state machine with a fake clock."""

from __future__ import annotations

import random

import pytest

from broker_agent.lifecycle import (
    Backoff,
    BrokerLifecycle,
    BrokerState,
    ControllerSelector,
    LifecycleConfig,
    Send,
)

S = BrokerState


def make(controllers: int = 3, **over) -> BrokerLifecycle:
    cfg = LifecycleConfig(broker_id=1, cluster_id="c", incarnation_id="inc-1", **over)
    return BrokerLifecycle(cfg, controllers, random.Random(4), now_ms=0)


def send_one(lc: BrokerLifecycle, now: int) -> Send:
    out = lc.tick(now)
    assert len(out.sends) == 1, out
    return out.sends[0]


def heartbeat_reply(caught_up: bool = True, fenced: bool = False, shut: bool = False) -> dict:
    return {
        "is_caught_up": caught_up,
        "is_fenced": fenced,
        "should_shut_down": shut,
        "in_controlled_shutdown": False,
    }


def register(lc: BrokerLifecycle, now: int = 0, epoch: int = 10) -> None:
    s = send_one(lc, now)
    assert s.kind == "register" and s.body["incarnation_id"] == "inc-1"
    lc.on_response(s.request_id, {"broker_epoch": epoch}, now)


def test_full_happy_path() -> None:
    lc = make()
    register(lc)
    lc.set_metadata_offset(5)
    s = send_one(lc, 0)
    assert s.kind == "heartbeat" and s.body["want_fence"] and s.body["broker_epoch"] == 10
    out = lc.on_response(s.request_id, heartbeat_reply(caught_up=False, fenced=True), 0)
    assert lc.state is S.STARTING and not out.changes
    assert lc.next_wake_ms() == 2000  # heartbeat interval
    assert lc.tick(1999).sends == []
    lc.set_metadata_offset(10)
    s = send_one(lc, 2000)
    out = lc.on_response(s.request_id, heartbeat_reply(caught_up=True, fenced=True), 2000)
    assert lc.state is S.RECOVERY and [c.new for c in out.changes] == [S.RECOVERY]
    s = send_one(lc, 2000)  # asks to be unfenced at once
    assert not s.body["want_fence"]
    out = lc.on_response(s.request_id, heartbeat_reply(), 2000)
    assert lc.state is S.RUNNING


def running(**over) -> BrokerLifecycle:
    lc = make(**over)
    register(lc)
    for caught_up in (True, True):
        s = send_one(lc, lc.next_wake_ms())
        lc.on_response(
            s.request_id,
            heartbeat_reply(caught_up=caught_up, fenced=lc.state is S.STARTING),
            s.timeout_ms,
        )
    assert lc.state is S.RUNNING
    return lc


def test_fenced_while_running_goes_back_to_recovery() -> None:
    lc = running()
    s = send_one(lc, lc.next_wake_ms())
    lc.on_response(s.request_id, heartbeat_reply(fenced=True), 10_000)
    assert lc.state is S.RECOVERY


def test_stale_epoch_reregisters_with_same_incarnation() -> None:
    lc = running()
    s = send_one(lc, lc.next_wake_ms())
    out = lc.on_error(s.request_id, "STALE_BROKER_EPOCH", 10_000)
    assert lc.state is S.STARTING and out.changes[0].reason.startswith("stale broker epoch")
    s = send_one(lc, lc.next_wake_ms())
    assert s.kind == "register" and s.body["incarnation_id"] == "inc-1"


def test_not_controller_hint_is_followed_at_once() -> None:
    lc = make()
    s = send_one(lc, 0)
    lc.on_error(s.request_id, "NOT_CONTROLLER", 0, leader_hint=2)
    s2 = send_one(lc, 0)
    assert s2.controller == 2


def test_unanswered_controller_is_skipped_round_robin() -> None:
    lc = make()
    s = send_one(lc, 0)
    assert lc.tick(s.timeout_ms - 1).sends == []
    lc.tick(s.timeout_ms)  # times out: next controller after a backoff
    s2 = send_one(lc, lc.next_wake_ms())
    assert s2.controller == (s.controller + 1) % 3


def test_backoff_bounds() -> None:
    b = Backoff(initial_ms=100, max_ms=5000, jitter=0.2, rng=random.Random(1))
    delays = [b.next_delay_ms() for _ in range(40)]
    assert 80 <= delays[0] <= 120
    assert 160 <= delays[1] <= 240
    assert all(0 <= d <= 5000 for d in delays)
    assert max(delays[10:]) == 5000 or min(delays[10:]) >= 4000
    b.reset()
    assert b.next_delay_ms() <= 120


def test_registration_retries_with_growing_backoff() -> None:
    lc = make(controllers=1)
    now = 0
    gaps = []
    for _ in range(8):
        s = send_one(lc, now)
        lc.on_error(s.request_id, "NETWORK", now)
        gaps.append(lc.next_wake_ms() - now)
        now = lc.next_wake_ms()
    assert gaps[0] < gaps[3] <= 5000 and max(gaps) <= 5000


def test_registered_broker_retries_within_heartbeat_interval() -> None:
    lc = running()
    for _ in range(10):
        s = send_one(lc, lc.next_wake_ms())
        now = lc.next_wake_ms()
        lc.on_error(s.request_id, "NETWORK", now)
        assert lc.next_wake_ms() - now <= 2000


def test_controlled_shutdown_granted() -> None:
    lc = running()
    out = lc.begin_shutdown(50_000)
    assert lc.state is S.PENDING_CONTROLLED_SHUTDOWN
    s = out.sends[0]
    assert s.body["want_shutdown"]
    out = lc.on_response(s.request_id, heartbeat_reply(), 50_000)
    assert out.exit_code is None
    s = send_one(lc, lc.next_wake_ms())
    out = lc.on_response(s.request_id, heartbeat_reply(shut=True, fenced=True), 50_600)
    assert lc.state is S.SHUTTING_DOWN and out.exit_code == 0


def test_controlled_shutdown_timeout() -> None:
    lc = running(controlled_shutdown_timeout_ms=3000)
    lc.begin_shutdown(50_000)
    out = lc.tick(52_999)
    assert out.exit_code is None
    out = lc.tick(53_000)
    assert lc.state is S.SHUTTING_DOWN and out.exit_code == 0
    assert "timed out" in out.changes[0].reason


def test_shutdown_before_registration_is_immediate() -> None:
    lc = make()
    out = lc.begin_shutdown(0)
    assert lc.state is S.SHUTTING_DOWN and out.exit_code == 0


def test_shutdown_while_fenced_in_recovery_is_immediate() -> None:
    # a fenced broker leads nothing: RECOVERY -> SHUTTING_DOWN without asking
    lc = running()
    s = send_one(lc, lc.next_wake_ms())
    lc.on_response(s.request_id, heartbeat_reply(fenced=True), 10_000)
    assert lc.state is S.RECOVERY
    out = lc.begin_shutdown(10_001)
    assert lc.state is S.SHUTTING_DOWN and out.exit_code == 0 and out.sends == []
    assert [(c.old, c.new) for c in out.changes] == [(S.RECOVERY, S.SHUTTING_DOWN)]


def test_late_response_is_ignored() -> None:
    lc = make()
    s = send_one(lc, 0)
    lc.tick(s.timeout_ms)
    out = lc.on_response(s.request_id, {"broker_epoch": 3}, s.timeout_ms + 1)
    assert not lc.registered and out.sends == []


def test_selector_needs_controllers() -> None:
    with pytest.raises(ValueError):
        ControllerSelector(0, random.Random(0))


# ------------------------------------------------------------ a fake controller
#
# `drive` runs the machine on a fake clock against a scripted controller: the
# script maps each Send to ("ok", reply), ("err", code, hint) or None (no answer,
# so the request times out). Every send is recorded with its time.


def drive(lc: BrokerLifecycle, script, until_ms: int, start_ms: int = 0) -> list[tuple[int, Send]]:
    now = start_ms
    sent: list[tuple[int, Send]] = []
    same_time = 0
    while now <= until_ms and lc.state is not S.SHUTTING_DOWN:
        for s in lc.tick(now).sends:
            sent.append((now, s))
            answer = script(now, s)
            if answer is None:
                continue
            if answer[0] == "ok":
                lc.on_response(s.request_id, answer[1], now)
            else:
                lc.on_error(s.request_id, answer[1], now, answer[2] if len(answer) > 2 else None)
        nxt = lc.next_wake_ms()
        if nxt <= now and same_time < 10:
            same_time += 1  # something to send at once: same instant
            continue
        same_time = 0
        now = max(now + 1, nxt)
    return sent


def healthy(active: int = 0, epoch: int = 10, caught_up_at: int = 0):
    def script(now: int, s: Send):
        if s.controller != active:
            return ("err", "NOT_CONTROLLER", active)
        if s.kind == "register":
            return ("ok", {"broker_epoch": epoch})
        caught = now >= caught_up_at
        fenced = s.body["want_fence"] or not caught
        return (
            "ok",
            heartbeat_reply(caught_up=caught, fenced=fenced, shut=s.body["want_shutdown"]),
        )

    return script


def test_heartbeats_every_interval() -> None:
    lc = make(heartbeat_interval_ms=2000)
    sent = drive(lc, healthy(active=lc.selector.current), until_ms=20_000)
    beats = [t for t, s in sent if s.kind == "heartbeat"]
    assert lc.state is S.RUNNING
    # after start-up (register, caught-up, unfence at t=0) one heartbeat per interval
    steady = [t for t in beats if t > 0]
    assert steady == list(range(2000, 20_001, 2000))


def test_every_transition_in_order() -> None:
    lc = make()
    changes = []
    active = lc.selector.current

    def script(now: int, s: Send):
        r = healthy(active=active, caught_up_at=4000)(now, s)
        return r

    def record(out) -> None:
        changes.extend((c.old, c.new) for c in out.changes)

    # drive by hand so that every Output's changes are recorded
    now = 0
    while now <= 10_000:
        out = lc.tick(now)
        record(out)
        for s in out.sends:
            a = script(now, s)
            record(lc.on_response(s.request_id, a[1], now))
        now = max(now + 1, lc.next_wake_ms())
    # fenced by the controller, then unfenced again
    s = send_one(lc, lc.next_wake_ms())
    record(lc.on_response(s.request_id, heartbeat_reply(fenced=True), s.timeout_ms))
    s = send_one(lc, lc.next_wake_ms())
    assert not s.body["want_fence"]  # RECOVERY asks to be unfenced
    record(lc.on_response(s.request_id, heartbeat_reply(), 20_000))
    record(lc.begin_shutdown(20_000))
    s = send_one(lc, lc.next_wake_ms()) if lc._in_flight is None else lc._in_flight
    record(lc.on_response(s.request_id, heartbeat_reply(shut=True, fenced=True), 20_100))
    assert changes == [
        (S.STARTING, S.RECOVERY),
        (S.RECOVERY, S.RUNNING),
        (S.RUNNING, S.RECOVERY),
        (S.RECOVERY, S.RUNNING),
        (S.RUNNING, S.PENDING_CONTROLLED_SHUTDOWN),
        (S.PENDING_CONTROLLED_SHUTDOWN, S.SHUTTING_DOWN),
    ]


def test_starting_asks_to_stay_fenced_until_caught_up() -> None:
    lc = make()
    sent = drive(lc, healthy(active=lc.selector.current, caught_up_at=6000), until_ms=5000)
    assert lc.state is S.STARTING
    assert all(s.body["want_fence"] for _, s in sent if s.kind == "heartbeat")


def test_metadata_catch_up_triggers_a_heartbeat_at_once() -> None:
    lc = make()
    register(lc, epoch=40)
    s = send_one(lc, 0)
    lc.on_response(s.request_id, heartbeat_reply(caught_up=False, fenced=True), 0)
    assert lc.next_wake_ms() == 2000
    lc.set_metadata_offset(39, now_ms=300)
    assert lc.next_wake_ms() == 2000  # not yet at our registration
    lc.set_metadata_offset(40, now_ms=350)
    assert lc.next_wake_ms() == 350
    lc.set_metadata_offset(41, now_ms=400)  # only on crossing
    s = send_one(lc, 350)
    assert s.body["current_metadata_offset"] == 41


def test_stale_epoch_from_recovery_reregisters_and_gets_new_epoch() -> None:
    lc = running()
    s = send_one(lc, lc.next_wake_ms())
    lc.on_response(s.request_id, heartbeat_reply(fenced=True), 10_000)
    assert lc.state is S.RECOVERY
    s = send_one(lc, lc.next_wake_ms())
    lc.on_error(s.request_id, "STALE_BROKER_EPOCH", 10_000)
    assert lc.state is S.STARTING and not lc.registered and lc.is_fenced
    s = send_one(lc, lc.next_wake_ms())
    assert s.kind == "register"
    lc.on_response(s.request_id, {"broker_epoch": 77}, lc.next_wake_ms())
    s = send_one(lc, lc.next_wake_ms())
    assert s.body["broker_epoch"] == 77 and s.body["want_fence"]


def test_stale_epoch_during_controlled_shutdown_exits() -> None:
    lc = running()
    out = lc.begin_shutdown(50_000)
    out = lc.on_error(out.sends[0].request_id, "STALE_BROKER_EPOCH", 50_000)
    assert lc.state is S.SHUTTING_DOWN and out.exit_code == 0


def test_fatal_registration_error_exits_nonzero() -> None:
    lc = make()
    s = send_one(lc, 0)
    out = lc.on_error(s.request_id, "INVALID_REQUEST", 0)
    assert lc.state is S.SHUTTING_DOWN and out.exit_code == 1
    assert lc.fatal == "INVALID_REQUEST"
    assert lc.tick(10_000).sends == []


def test_a_cluster_id_refusal_is_fatal_only_once_every_controller_said_it() -> None:
    # One stale URL in --controllers serves another cluster: its refusal moves the
    # broker on to the next controller (after a failover, too: a heartbeat there
    # is STALE_BROKER_EPOCH, then the registration is refused). Fatal once every
    # controller in the list refused the cluster id in a row.
    lc = make(controllers=3)
    s = send_one(lc, 0)
    lc.on_error(s.request_id, "INCONSISTENT_CLUSTER_ID", 0)
    assert lc.state is S.STARTING and lc.fatal is None
    s2 = send_one(lc, lc.next_wake_ms())
    assert s2.kind == "register" and s2.controller == (s.controller + 1) % 3
    lc.on_response(s2.request_id, {"broker_epoch": 7}, 1)
    assert lc.broker_epoch == 7
    # a wrong cluster id everywhere: three refusals in a row, then exit 1
    lc = make(controllers=3)
    now, seen = 0, []
    for _ in range(3):
        s = send_one(lc, now)
        seen.append(s.controller)
        out = lc.on_error(s.request_id, "INCONSISTENT_CLUSTER_ID", now)
        now = lc.next_wake_ms()
    assert sorted(seen) == [0, 1, 2]
    assert out.exit_code == 1 and lc.fatal == "INCONSISTENT_CLUSTER_ID"
    # with one controller, the first refusal is final
    lc = make(controllers=1)
    s = send_one(lc, 0)
    assert lc.on_error(s.request_id, "INCONSISTENT_CLUSTER_ID", 0).exit_code == 1


def test_duplicate_registration_is_retried_with_backoff() -> None:
    lc = make(controllers=1)
    now, gaps = 0, []
    for _ in range(6):
        s = send_one(lc, now)
        lc.on_error(s.request_id, "DUPLICATE_BROKER_REGISTRATION", now)
        gaps.append(lc.next_wake_ms() - now)
        now = lc.next_wake_ms()
    assert lc.state is S.STARTING
    assert gaps == sorted(gaps) or gaps[-1] >= 4000
    assert 80 <= gaps[0] <= 120


def test_not_controller_without_hint_goes_round_robin() -> None:
    lc = make(controllers=3)
    seen = []
    now = 0
    for _ in range(6):
        s = send_one(lc, now)
        seen.append(s.controller)
        lc.on_error(s.request_id, "NOT_CONTROLLER", now)
        assert lc.next_wake_ms() > now  # with backoff
        now = lc.next_wake_ms()
    first = seen[0]
    assert seen == [(first + i) % 3 for i in range(6)]


def test_hint_to_the_same_controller_backs_off() -> None:
    lc = make(controllers=3)
    s = send_one(lc, 0)
    lc.on_error(s.request_id, "NOT_CONTROLLER", 0, leader_hint=s.controller)
    assert lc.next_wake_ms() > 0


def test_bouncing_stale_hints_are_bounded() -> None:
    # controllers 0 and 1 each name the other: hints are followed at once only a
    # bounded number of times, then the broker backs off
    lc = make(controllers=3)
    now = 0
    immediate = 0
    for _ in range(12):
        s = send_one(lc, now)
        other = 1 if s.controller == 0 else 0
        lc.on_error(s.request_id, "NOT_CONTROLLER", now, leader_hint=other)
        if lc.next_wake_ms() == now:
            immediate += 1
        else:
            now = lc.next_wake_ms()
            break
    assert immediate <= 3 and lc.next_wake_ms() > 0


def test_hint_hops_reset_after_an_answer() -> None:
    lc = make(controllers=3)
    active = 2
    sent = drive(lc, healthy(active=active), until_ms=3000)
    assert lc.state is S.RUNNING
    assert all(s.controller == active for _, s in sent[1:])


def test_controller_that_does_not_answer_is_skipped() -> None:
    lc = make(controllers=3)
    dead = lc.selector.current
    active = (dead + 1) % 3

    def script(now: int, s: Send):
        if s.controller == dead:
            return None  # never answers: times out after request_timeout_ms
        return healthy(active=active)(now, s)

    sent = drive(lc, script, until_ms=8000)
    assert sent[0][1].controller == dead
    assert sent[1][0] >= 2000  # waited the request timeout, then a backoff
    assert sent[1][1].controller == active
    assert lc.state is S.RUNNING


def test_dead_active_controller_keeps_the_session() -> None:
    # the active controller dies while RUNNING: every retry comes within one heartbeat
    # interval, so the broker keeps contacting someone long before a 9 s session ends
    lc = make(controllers=3)
    active = lc.selector.current
    sent = drive(lc, healthy(active=active), until_ms=4000)
    assert lc.state is S.RUNNING
    new_active = (active + 2) % 3

    def after(now: int, s: Send):
        if s.controller == active:
            return ("err", "NETWORK")
        return healthy(active=new_active)(now, s)

    start = sent[-1][0] + 1
    sent = drive(lc, after, until_ms=30_000, start_ms=start)
    first_failure = sent[0][0]
    assert sent[0][1].controller == active
    ok_times = [t for t, s in sent if s.controller == new_active]
    assert ok_times and ok_times[0] - first_failure <= 2000
    gaps = [b - a for a, b in zip(ok_times, ok_times[1:], strict=False)]
    assert max(gaps) <= 2000
    assert lc.state is S.RUNNING


def test_shutdown_with_a_heartbeat_in_flight_asks_at_once() -> None:
    lc = running()
    s = send_one(lc, lc.next_wake_ms())  # an ordinary heartbeat, no want_shutdown
    out = lc.begin_shutdown(s.timeout_ms)
    assert out.sends == [] and lc.state is S.PENDING_CONTROLLED_SHUTDOWN
    t = lc.next_wake_ms()
    lc.on_response(s.request_id, heartbeat_reply(), t)
    s2 = send_one(lc, t)
    assert s2.body["want_shutdown"]


def test_pending_shutdown_heartbeats_often_and_times_out() -> None:
    lc = running(controlled_shutdown_timeout_ms=5000)
    start = lc.next_wake_ms()
    lc.begin_shutdown(start)

    def never_granted(now: int, s: Send):
        assert s.body["want_shutdown"]
        return ("ok", heartbeat_reply())

    # begin_shutdown already sent one: answer it first
    first = lc._in_flight
    lc.on_response(first.request_id, heartbeat_reply(), start)
    sent = drive(lc, never_granted, until_ms=start + 10_000, start_ms=start)
    assert lc.state is S.SHUTTING_DOWN
    assert all(b - a <= 500 for (a, _), (b, _) in zip(sent, sent[1:], strict=False))
    assert sent[-1][0] < start + 5000


def test_answers_after_shutting_down_are_ignored() -> None:
    lc = running(controlled_shutdown_timeout_ms=1000)
    out = lc.begin_shutdown(100_000)
    s = out.sends[0]
    lc.tick(101_000)
    assert lc.state is S.SHUTTING_DOWN
    assert lc.on_response(s.request_id, heartbeat_reply(shut=True), 101_001).changes == []
    assert lc.on_error(s.request_id, "STALE_BROKER_EPOCH", 101_001).changes == []


@pytest.mark.parametrize("seed", range(20))
def test_backoff_jitter_bounds_for_any_seed(seed: int) -> None:
    b = Backoff(initial_ms=100, max_ms=5000, jitter=0.2, rng=random.Random(seed))
    for n in range(30):
        base = min(5000, 100 * 2**n)
        d = b.next_delay_ms()
        assert int(base * 0.8) <= d <= min(5000, base * 1.2)


def test_same_seed_same_schedule() -> None:
    def schedule(seed: int) -> list[int]:
        cfg = LifecycleConfig(broker_id=1, cluster_id="c", incarnation_id="i")
        lc = BrokerLifecycle(cfg, 3, random.Random(seed), now_ms=0)
        now, out = 0, []
        for _ in range(10):
            s = send_one(lc, now)
            lc.on_error(s.request_id, "NETWORK", now)
            now = lc.next_wake_ms()
            out.append(now)
        return out

    assert schedule(5) == schedule(5)
    assert schedule(5) != schedule(6)


def test_catch_up_during_an_in_flight_heartbeat_is_reported_at_once() -> None:
    lc = make()
    register(lc, epoch=40)
    s = send_one(lc, 0)  # reports offset -1
    lc.set_metadata_offset(45, now_ms=5)  # the follower reaches our registration meanwhile
    lc.on_response(s.request_id, heartbeat_reply(caught_up=False, fenced=True), 10)
    s = send_one(lc, 10)
    assert s.body["current_metadata_offset"] == 45


@pytest.mark.parametrize(
    "reply",
    [
        {},
        {"broker_epoch": None},
        {"broker_epoch": -1},
        {"broker_epoch": "7"},
        {"broker_epoch": True},
    ],
)
def test_a_registration_answer_without_an_epoch_is_an_error_retried_elsewhere(reply: dict) -> None:
    # a 2xx body that is not a registration (a proxy's page, a truncated answer)
    lc = make()
    s = send_one(lc, 0)
    out = lc.on_response(s.request_id, reply, 0)
    assert not out.changes and lc.state is S.STARTING and not lc.registered
    assert lc.errors == 1 and lc.selector.current == (s.controller + 1) % 3
    retry_at = lc.next_wake_ms()
    assert 80 <= retry_at <= 120  # the first backoff step, jittered
    again = send_one(lc, retry_at)
    assert again.kind == "register" and again.controller != s.controller
    lc.on_response(again.request_id, {"broker_epoch": 7}, retry_at)
    assert lc.broker_epoch == 7


def test_an_unexpected_error_of_the_agent_is_retried_with_backoff() -> None:
    lc = make()
    s = send_one(lc, 0)
    lc.on_error(s.request_id, "UNEXPECTED_ERROR", 0)
    assert lc.state is S.STARTING and lc.next_wake_ms() > 0
    delays = []
    for _ in range(12):
        now = lc.next_wake_ms()
        s = send_one(lc, now)
        lc.on_error(s.request_id, "UNEXPECTED_ERROR", now)
        delays.append(lc.next_wake_ms() - now)
    assert delays[0] < delays[4] and max(delays) <= 5000  # grows, bounded by backoff_max_ms


def test_a_queued_request_times_out_from_when_it_is_sent() -> None:
    # a fleet's request waits at its send gate first: the timeout starts at on_sent
    lc = make(request_timeout_ms=1000, queue_timeout_ms=1000)
    s = send_one(lc, 0)
    assert lc.next_wake_ms() == 2000  # queue bound + request timeout
    lc.on_sent(s.request_id, 1500)
    assert lc.next_wake_ms() == 2500 and lc.waiting_for(s.request_id)
    assert lc.tick(2499).sends == []
    lc.tick(2500)  # sent and unanswered: the controller is skipped
    assert not lc.waiting_for(s.request_id) and lc.selector.current == (s.controller + 1) % 3


def test_a_request_that_never_left_the_queue_does_not_skip_the_controller() -> None:
    lc = make(request_timeout_ms=1000, queue_timeout_ms=1000)
    s = send_one(lc, 0)
    lc.tick(2000)  # given up while still queued: says nothing about the controller
    assert not lc.waiting_for(s.request_id) and lc.selector.current == s.controller
    lc.on_sent(s.request_id, 2000)  # the shell then drops it instead of sending
    assert not lc.waiting_for(s.request_id)
    again = send_one(lc, lc.next_wake_ms())
    assert again.kind == "register" and again.controller == s.controller


# KIP-966: the registration carries the broker epoch of the last clean shutdown


def test_a_first_registration_carries_the_epoch_of_the_last_clean_shutdown() -> None:
    lc = make(previous_broker_epoch=42)
    s = send_one(lc, 0)
    assert s.kind == "register" and s.body["previous_broker_epoch"] == 42


def test_a_broker_without_a_clean_shutdown_registers_with_minus_one() -> None:
    s = send_one(make(), 0)
    assert s.body["previous_broker_epoch"] == -1


def test_a_reregistration_of_the_same_process_carries_its_own_epoch() -> None:
    lc = running()
    epoch = lc.broker_epoch
    s = send_one(lc, lc.next_wake_ms())
    lc.on_error(s.request_id, "STALE_BROKER_EPOCH", 10_000)
    s = send_one(lc, lc.next_wake_ms())
    assert s.kind == "register" and s.body["previous_broker_epoch"] == epoch


def test_only_a_granted_controlled_shutdown_is_clean() -> None:
    lc = running(controlled_shutdown_timeout_ms=3000)
    out = lc.begin_shutdown(50_000)
    lc.on_response(out.sends[0].request_id, heartbeat_reply(shut=True, fenced=True), 50_000)
    assert lc.clean_shutdown and lc.state is S.SHUTTING_DOWN
    lc = running(controlled_shutdown_timeout_ms=3000)
    lc.begin_shutdown(50_000)
    out = lc.tick(53_001)
    assert out.exit_code is not None and not lc.clean_shutdown


def test_a_fleet_that_lost_its_connections_together_reconnects_spread_over_a_second() -> None:
    """1,000 brokers (each its own seeded rng) lose their connection at the same
    moment: their retries spread over the backoff plus reconnect_jitter_ms (1 s), not
    the +-20% of 100 ms the backoff alone gives (a handshake storm on the next
    controller, issue 25); an answer error still retries on the backoff alone."""
    retries = []
    for seed in range(1_000):
        lc = running()
        lc.rng = random.Random(seed)  # each broker its own
        s = send_one(lc, lc.next_wake_ms())
        now = lc.next_wake_ms()
        lc.on_error(s.request_id, "NETWORK", now)
        retries.append(lc.next_wake_ms() - now)
    assert min(retries) >= 80 and max(retries) <= 1_120
    per_100ms = [sum(1 for r in retries if k * 100 <= r < (k + 1) * 100) for k in range(12)]
    assert max(per_100ms) <= 200  # (+-20% of 100 ms alone: all 1,000 in one 100 ms)
    lc = running()
    s = send_one(lc, lc.next_wake_ms())
    now = lc.next_wake_ms()
    lc.on_error(s.request_id, "REQUEST_TIMED_OUT", now)
    assert 80 <= lc.next_wake_ms() - now <= 120


@pytest.mark.parametrize("code", ["HTTP_404", "HTTP_502", "UNKNOWN_SERVER_ERROR"])
def test_an_answer_that_is_no_controllers_moves_on_to_the_next(code: str) -> None:
    # A URL in --controllers where something else answers (a proxy, another
    # service): asking it again cannot help, and the first pick is random.
    lc = make()
    s = send_one(lc, 0)
    lc.on_error(s.request_id, code, 0)
    assert lc.state is S.STARTING and lc.selector.current == (s.controller + 1) % 3
    again = send_one(lc, lc.next_wake_ms())
    assert again.kind == "register" and again.controller != s.controller


def test_a_heartbeat_refused_a_credential_moves_on_but_a_registration_is_final() -> None:
    # Running: a controller that has not reloaded a credential rotation yet answers
    # 401; another may take it. Registering: the configuration is wrong, exit 1.
    lc = make()
    register(lc)
    s = send_one(lc, 1)
    assert s.kind == "heartbeat"
    lc.on_error(s.request_id, "UNAUTHORIZED", 1)
    assert lc.state is S.STARTING and lc.selector.current == (s.controller + 1) % 3
    assert send_one(lc, lc.next_wake_ms()).controller != s.controller
    fresh = make()
    s = send_one(fresh, 0)
    out = fresh.on_error(s.request_id, "UNAUTHORIZED", 0)
    assert out.exit_code == 1 and fresh.fatal == "UNAUTHORIZED"


@pytest.mark.parametrize("reply", [{}, {"is_fenced": "false"}, {"is_fenced": None}])
def test_a_heartbeat_answer_that_is_no_heartbeat_reply_is_an_error(reply: dict) -> None:
    # A 2xx body without the reply's fields (a proxy's page): retried elsewhere
    # with backoff, not read as "fenced" (a running broker would go to RECOVERY).
    lc = make()
    register(lc)
    s = send_one(lc, 1)
    lc.on_response(s.request_id, heartbeat_reply(), 1)
    assert lc.state is S.RUNNING
    now = lc.next_wake_ms()
    s = send_one(lc, now)
    out = lc.on_response(s.request_id, reply, now)
    assert not out.changes and lc.state is S.RUNNING and lc.errors == 1
    assert lc.selector.current == (s.controller + 1) % 3
