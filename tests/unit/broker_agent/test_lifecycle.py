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


def test_late_response_is_ignored() -> None:
    lc = make()
    s = send_one(lc, 0)
    lc.tick(s.timeout_ms)
    out = lc.on_response(s.request_id, {"broker_epoch": 3}, s.timeout_ms + 1)
    assert not lc.registered and out.sends == []


def test_selector_needs_controllers() -> None:
    with pytest.raises(ValueError):
        ControllerSelector(0, random.Random(0))
