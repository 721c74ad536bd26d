"""The three hand-made stories of issue 20, with answers known in advance.

Each story is written through the real controller (`story.Story`), replayed
under the in-force settings (identity) and under the changed one; the answers
come from the story's own times.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_replay.whatif.facts import read_facts
from spark_replay.whatif.metrics import scenario_metrics
from spark_replay.whatif.replay import history_tables, scenario_tables
from spark_replay.whatif.scenario import build_scenarios
from tests.unit.whatif.story import T0, Story

S = 1000


def _replay(log: Path, tmp: Path, *sets: str, racks: str | None = None) -> tuple[dict, dict, dict]:
    """(actual tables, in-force tables, the scenario's tables)."""
    facts = read_facts(log, 9000)
    in_force, asked = build_scenarios(list(sets), racks=racks)
    actual = history_tables(log, tmp / "actual")
    same, _ = scenario_tables(facts, in_force, tmp / "in-force")
    other, stats = scenario_tables(facts, asked, tmp / "asked", keep_log=True)
    for name, table in actual.items():
        assert same[name].drop_columns(["scenario"]).to_pylist() == table.to_pylist(), name
    return actual, other, stats


def _rows(table, topic: str) -> list[dict]:  # noqa: ANN001
    return [r for r in table.to_pylist() if r["topic"] == topic]


def test_unclean_election_elects_the_live_replica_at_the_fence_that_took_the_whole_isr(
    tmp_path: Path,
) -> None:
    s = Story(tmp_path / "log")
    for b in (1, 2, 3):
        s.register(b)
    s.run_until(T0 + 3 * S)
    tid = s.create_topic("payments", [(1, 2, 3)])
    s.run_until(T0 + 5 * S)
    s.shrink_isr(tid, 0, (1, 2))  # replica 3 lags: out of the ISR, alive
    s.stop(1)
    s.run_until(T0 + 30 * S)
    s.stop(2)
    s.run_until(T0 + 60 * S)
    s.resume(2)  # the last ISR member comes back: the partition is online again
    s.run_until(T0 + 70 * S)
    log = s.close()

    actual, other, _ = _replay(log, tmp_path, "unclean.leader.election.enable=true")
    [window] = _rows(actual["offline_partitions"], "payments")
    assert window["end_time_ms"] == T0 + 60 * S
    [unclean] = [r for r in _rows(other["leader_elections"], "payments") if r["unclean"]]
    assert (unclean["offset"], unclean["new_leader"], unclean["cause"]) == (
        window["start_offset"],
        3,
        "FENCE",
    )
    assert unclean["append_time_ms"] == window["start_time_ms"]
    assert _rows(other["offline_partitions"], "payments") == []
    end = T0 + 70 * S
    before = scenario_metrics(actual["leader_elections"], actual["offline_partitions"], T0, end)
    after = scenario_metrics(other["leader_elections"], other["offline_partitions"], T0, end)
    shrink = (window["end_time_ms"] - window["start_time_ms"]) / 1000
    assert shrink > 0
    assert before["offline_partition_seconds"] - after[
        "offline_partition_seconds"
    ] == pytest.approx(shrink)
    assert (before["unclean_elections"], after["unclean_elections"]) == (0, 1)


def test_a_broker_paused_20s_is_never_fenced_under_a_30s_session(tmp_path: Path) -> None:
    s = Story(tmp_path / "log")
    for b in (1, 2, 3):
        s.register(b)
    s.run_until(T0 + 3 * S)
    s.create_topic("orders", [(2, 1, 3)])
    s.run_until(T0 + 10 * S)
    s.stop(2)
    s.run_until(T0 + 30 * S)
    s.resume(2)  # heard from again 20 s after it went silent
    s.run_until(T0 + 40 * S)
    log = s.close()

    actual, other, stats = _replay(log, tmp_path, "broker.session.timeout.ms=30000")
    fenced = [r for r in _rows(actual["leader_elections"], "orders") if r["cause"] == "FENCE"]
    assert [(r["old_leader"], r["new_leader"], r["cause_broker_id"]) for r in fenced] == [(2, 1, 2)]
    assert [r["cause"] for r in _rows(other["leader_elections"], "orders")] == ["CREATE"]
    assert stats["fences"] == 0
    from metadata_log.records import FenceBrokerRecord
    from metadata_log.replay import replay_log

    image = replay_log(tmp_path / "asked" / "log")
    assert not image.brokers[2].fenced
    assert FenceBrokerRecord not in _record_types(tmp_path / "asked" / "log")


def _record_types(log: Path) -> set[type]:
    from metadata_log.replay import iter_file_batches, metadata_dir, segment_files

    return {
        type(r)
        for _, p in segment_files(metadata_dir(log))
        for b in iter_file_batches(p, allow_torn_tail=False)
        for r in b.records
    }


def test_rack_aware_placement_keeps_every_partition_online_when_rack_a_is_lost(
    tmp_path: Path,
) -> None:
    s = Story(tmp_path / "log")
    for b in (1, 2, 3):
        s.register(b)  # the log has no racks: --racks gives them
    s.run_until(T0 + 3 * S)
    s.create_topic("t", [(1, 2), (2, 1), (1, 3), (3, 2), (2, 1), (1, 2)])
    s.run_until(T0 + 10 * S)
    s.stop(1)
    s.stop(2)  # rack a
    s.run_until(T0 + 40 * S)
    log = s.close()

    actual, other, _ = _replay(log, tmp_path, "replica.placement=rack-aware", racks="1=a,2=a,3=b")
    assert sorted(r["partition_id"] for r in _rows(actual["offline_partitions"], "t")) == [
        0,
        1,
        4,
        5,
    ]
    assert _rows(other["offline_partitions"], "t") == []
    # every partition was placed with a replica on rack b (broker 3), which leads now
    from metadata_log.replay import replay_log

    image = replay_log(tmp_path / "asked" / "log")
    [topic] = image.topics.values()
    assert {p.leader for p in topic.partitions.values()} == {3}


def test_elr_with_min_isr_2_elects_the_first_replica_back_from_the_elr(tmp_path: Path) -> None:
    """KIP-966: with min.insync.replicas=2, a replica fenced out of a 2-member ISR
    stays eligible (ELR); when it comes back first it leads, cleanly, while the
    log (no ELR) waits for the last ISR member."""
    s = Story(tmp_path / "log")  # metadata.version only: ELR off in the log
    for b in (1, 2, 3):
        s.register(b)
    s.run_until(T0 + 3 * S)
    s.create_topic("payments", [(1, 2)])
    s.run_until(T0 + 10 * S)
    s.stop(1)
    s.run_until(T0 + 30 * S)
    s.stop(2)
    s.run_until(T0 + 60 * S)
    s.resume(1)  # the first to die comes back first
    s.run_until(T0 + 90 * S)
    s.resume(2)
    s.run_until(T0 + 100 * S)
    log = s.close()

    actual, other, _ = _replay(
        log, tmp_path, "eligible.leader.replicas.enable=true", "min.insync.replicas=2"
    )
    [window] = _rows(actual["offline_partitions"], "payments")
    assert window["end_time_ms"] == T0 + 90 * S
    [elr_window] = _rows(other["offline_partitions"], "payments")
    assert elr_window["start_time_ms"] == window["start_time_ms"]
    assert elr_window["end_time_ms"] == T0 + 60 * S
    back = [r for r in _rows(other["leader_elections"], "payments") if r["cause"] == "UNFENCE"]
    assert [(r["new_leader"], r["append_time_ms"]) for r in back] == [(1, T0 + 60 * S)]
    from metadata_log.records import ELIGIBLE_LEADER_REPLICAS_FEATURE
    from metadata_log.replay import replay_log

    assert replay_log(tmp_path / "asked" / "log").features[ELIGIBLE_LEADER_REPLICAS_FEATURE] == 1
    assert ELIGIBLE_LEADER_REPLICAS_FEATURE not in replay_log(log).features
