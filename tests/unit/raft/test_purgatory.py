"""The purgatory of parked fetches: completion by key, expiry by deadline."""

from __future__ import annotations

import random

from kraft.raft.purgatory import Purgatory


def test_complete_below_takes_exactly_the_operations_waiting_below_the_end():
    p: Purgatory[str] = Purgatory()
    p.park(5, 100, "a")
    p.park(7, 100, "b")
    p.park(5, 200, "c")
    p.park(9, 50, "d")
    assert sorted(p.complete_below(6)) == ["a", "c"]
    assert sorted(p) == ["b", "d"]
    assert p.complete_below(7) == []  # waiting at 7 needs something beyond 7
    assert p.complete_below(8) == ["b"]
    assert len(p) == 1


def test_expire_takes_operations_at_or_past_their_deadline_in_order():
    p: Purgatory[int] = Purgatory()
    for i, deadline in enumerate([30, 10, 20, 10]):
        p.park(i, deadline, i)
    assert p.next_deadline_ms() == 10
    assert p.expire(9) == []
    assert sorted(p.expire(10)) == [1, 3]
    assert p.next_deadline_ms() == 20
    assert p.expire(100) == [2, 0]
    assert p.next_deadline_ms() is None and len(p) == 0


def test_completed_operations_do_not_expire_later():
    p: Purgatory[str] = Purgatory()
    p.park(1, 10, "x")
    p.park(1, 20, "y")
    assert sorted(p.complete_below(2)) == ["x", "y"]
    assert p.next_deadline_ms() is None  # stale heap entries are skipped
    assert p.expire(100) == []


def test_complete_all_empties_it():
    p: Purgatory[int] = Purgatory()
    for i in range(5):
        p.park(i, i, i)
    assert sorted(p.complete_all()) == list(range(5))
    assert len(p) == 0 and p.next_deadline_ms() is None and p.expire(10) == []


def test_against_a_model():
    rng = random.Random(7)
    p: Purgatory[int] = Purgatory()
    model: dict[int, tuple[int, int]] = {}
    now = 0
    for op in range(5_000):
        choice = rng.random()
        if choice < 0.5:
            key, deadline = rng.randint(0, 100), now + rng.randint(0, 500)
            p.park(key, deadline, op)
            model[op] = (key, deadline)
        elif choice < 0.7:
            end = rng.randint(0, 110)
            got = sorted(p.complete_below(end))
            want = sorted(o for o, (k, _) in model.items() if k < end)
            assert got == want
            for o in want:
                del model[o]
        else:
            now += rng.randint(0, 100)
            got = sorted(p.expire(now))
            want = sorted(o for o, (_, d) in model.items() if d <= now)
            assert got == want
            for o in want:
                del model[o]
        assert len(p) == len(model)
        nd = p.next_deadline_ms()
        assert nd == (min(d for _, d in model.values()) if model else None)


def test_heap_stays_proportional_to_what_is_parked_on_a_busy_log():
    p: Purgatory[int] = Purgatory()
    for end in range(2_000):  # every fetch is completed long before its deadline
        for i in range(10):
            p.park(end, 10**6, i)
        p.complete_below(end + 1)
    p.park(10**9, 5, -1)
    assert len(p._deadlines) <= 3 * 1024
    assert p.next_deadline_ms() == 5 and p.expire(5) == [-1]
