"""Identity: replayed with the settings in force, the facts give back the log.

For seeded generator stories (crashes, restarts, controlled shutdowns, ISR
shrinks and expansions, admin elections, unclean election enabled on a topic,
failovers, aborted transactions), the counterfactual log equals the actual one
record for record, so leader_elections and offline_partitions are equal row for
row. No row is pinned as unrecoverable for these stories.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from metadata_log.batch import iter_headers
from metadata_log.replay import iter_file_batches, metadata_dir, segment_files
from spark_replay.generator import generate, scaled_config
from spark_replay.whatif.facts import read_facts
from spark_replay.whatif.replay import history_tables, same_log, scenario_tables
from spark_replay.whatif.scenario import build_scenarios

SEEDS = (1, 2, 3, 4, 5)


def _records(log: Path) -> list[tuple]:
    return [
        (b.base_offset, b.append_time_ms, b.control, tuple(b.records))
        for _, p in segment_files(metadata_dir(log))
        for b in iter_file_batches(p, allow_torn_tail=False)
    ]


@pytest.mark.parametrize("seed", SEEDS)
def test_in_force_replay_of_a_seeded_story_rewrites_its_log_and_tables(
    seed: int, tmp_path: Path
) -> None:
    log = tmp_path / "data"
    generate(log, scaled_config(4000, seed, failover_rate=0.02, admin_rate=0.05))
    facts = read_facts(log, 9000)
    [in_force] = build_scenarios([])
    tables, stats = scenario_tables(facts, in_force, tmp_path / "w", keep_log=True)
    assert stats["refused"] == {} and stats["skipped"] == {}
    assert _records(tmp_path / "w" / "log") == _records(log)
    actual = history_tables(log, tmp_path / "actual")
    for name, table in actual.items():
        assert tables[name].drop_columns(["scenario"]).to_pylist() == table.to_pylist(), name
    assert actual["leader_elections"].num_rows > 0
    assert same_log(tmp_path / "w" / "log", log)


def test_racks_given_for_the_re_placements_leave_the_in_force_log_as_it_was(
    tmp_path: Path,
) -> None:
    """--racks are for a rack-aware placement of a log without racks: the in-force
    scenario registered them too, and its log was no longer the actual one."""
    log = tmp_path / "data"
    generate(log, scaled_config(1500, 1))
    facts = read_facts(log, 9000)
    racks = ",".join(f"{b}={'ab'[i % 2]}" for i, b in enumerate(facts.broker_ids))
    in_force, aware = build_scenarios(["replica.placement=rack-aware"], racks=racks)
    assert in_force.racks  # given to every scenario; used where the placement is redone
    scenario_tables(facts, in_force, tmp_path / "w", keep_log=True)
    assert same_log(tmp_path / "w" / "log", log)
    scenario_tables(facts, aware, tmp_path / "a", keep_log=True)
    registered = {
        r.rack
        for *_, recs in _records(tmp_path / "a" / "log")
        for r in recs
        if type(r).__name__ == "RegisterBrokerRecord"
    }
    assert registered == {"a", "b"}


class ListSink:
    """The engine's batches in a list (a BatchSink)."""

    def __init__(self) -> None:
        self.next_offset, self.batches = 0, []

    def append(self, batch: bytes, record_count: int) -> None:
        self.batches.append(batch)
        self.next_offset += record_count


def test_the_engines_direct_paths_write_the_general_paths_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone AlterPartition unit and a one-record result take a direct path in
    the engine, and AlterPartition answers come from the decision memo (shared
    by the scenarios of a process): under scenarios that change what the
    controller decides (so the partitions' results differ from the log's), the
    counterfactual log is the one the general path writes asking the
    controller every time, byte for byte, with the same stats."""
    from kraft.controller.quorum_controller import QuorumController
    from spark_replay.whatif.engine import Engine, forget_decisions, run_scenario

    asked = [0]
    alter_partition = QuorumController.alter_partition

    def counted(self: QuorumController, *args: Any) -> Any:
        asked[0] += 1
        return alter_partition(self, *args)

    monkeypatch.setattr(QuorumController, "alter_partition", counted)
    forget_decisions()

    log = tmp_path / "data"
    generate(log, scaled_config(3000, 7, failover_rate=0.02, admin_rate=0.05))
    facts = read_facts(log, 9000)
    sets = ["unclean.leader.election.enable=true", "broker.session.timeout.ms=3000"]
    scenarios = [build_scenarios([s])[1] for s in sets]
    scenarios.append(build_scenarios(["replica.placement=rack-unaware"])[1])
    logs = []
    calls = {True: 0, False: 0}  # the controller's AlterPartitions, memo on / off
    for scenario in [*build_scenarios([])[:1], *scenarios]:
        runs = []
        for direct, memo in ((True, True), (False, False), (True, False)):
            monkeypatch.setattr(Engine, "DIRECT_PATHS", direct)
            monkeypatch.setattr(Engine, "MEMO_DECISIONS", memo)
            sink = ListSink()
            before = asked[0]
            stats = run_scenario(facts, scenario, sink)
            if direct:
                calls[memo] += asked[0] - before
            runs.append((sink.batches, stats.to_dict()))
        assert runs[0] == runs[1] == runs[2], scenario.name
        assert len(runs[0][0]) > 500
        logs.append(runs[0][0])
    assert all(other != logs[0] for other in logs[1:])  # each scenario decided otherwise
    # the memo answered most of them (the same states recur, within a scenario and across)
    assert 0 < calls[True] < calls[False] / 2, calls


def test_the_decision_memo_answers_as_the_controller_does_under_every_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One memo serves every scenario a process runs: scenarios that set what an
    AlterPartition's answer depends on (ELR and min ISR, controlled shutdown,
    the session, placement) run one after another on it, and each writes the
    batches it writes asking the controller every time."""
    from spark_replay.whatif.engine import Engine, forget_decisions, run_scenario

    log = tmp_path / "data"
    generate(
        log,
        scaled_config(6000, 11, crash_rate=0.03, shutdown_rate=0.03, isr_shrink_rate=0.1),
    )
    facts = read_facts(log, 9000)
    elr = "eligible.leader.replicas.enable"
    sets = [
        [],
        [f"{elr}=true", "min.insync.replicas=2"],
        [f"{elr}=true", "min.insync.replicas=3"],
        [f"{elr}=true", "min.insync.replicas=1"],
        [f"{elr}=false", "min.insync.replicas=2"],
        ["controlled.shutdown.enable=false"],
        ["broker.session.timeout.ms=20000"],
        ["unclean.leader.election.enable=true", "broker.session.timeout.ms=3000"],
        ["replica.placement=rack-unaware"],
    ]
    scenarios = [build_scenarios(x)[-1] for x in sets]
    runs: dict[bool, list[Any]] = {}
    for memo in (False, True):
        monkeypatch.setattr(Engine, "MEMO_DECISIONS", memo)
        forget_decisions()
        runs[memo] = []
        for scenario in scenarios:
            sink = ListSink()
            stats = run_scenario(facts, scenario, sink)
            runs[memo].append((scenario.name, sink.batches, stats.to_dict()))
    for asked, memoized in zip(runs[False], runs[True], strict=True):
        assert asked == memoized, asked[0]
    assert len({len(r[1]) for r in runs[False]}) > 4  # the settings decided otherwise


def test_same_log_compares_every_byte_wherever_the_segments_are_cut(tmp_path: Path) -> None:
    """The job takes the actual tables for the in-force scenario when its log is
    the actual one byte for byte: one flipped byte, a missing tail or an extra
    batch is another log."""
    log = tmp_path / "data"
    generate(log, scaled_config(1500, 3))
    [(_, seg)] = segment_files(metadata_dir(log))
    data = seg.read_bytes()

    def variant(name: str, cuts: list[tuple[int, bytes]]) -> Path:
        d = tmp_path / name / "__cluster_metadata-0"
        d.mkdir(parents=True)
        for base, part in cuts:
            (d / f"{base:020d}.log").write_bytes(part)
        return tmp_path / name

    # a batch boundary near the middle: a second segment starts there
    headers = list(iter_headers(data, str(seg)))
    pos, mid = headers[len(headers) // 2]
    assert same_log(variant("recut", [(0, data[:pos]), (mid.base_offset, data[pos:])]), log)
    flipped = data[: pos + 30] + bytes([data[pos + 30] ^ 1]) + data[pos + 31 :]
    assert not same_log(variant("flipped", [(0, flipped)]), log)
    assert not same_log(variant("short", [(0, data[:pos])]), log)
    assert not same_log(variant("longer", [(0, data), (10**9, data[pos:])]), log)
    assert not same_log(log, variant("short2", [(0, data[:-1])]))


FIXTURES = Path(__file__).parents[2] / "fixtures" / "whatif"
# Logs of real clusters (tests/fixtures/whatif/README.md), each with the session
# timeout it ran with and the fences its session timer wrote. No row of them is
# pinned as unrecoverable: each is rewritten batch for batch.
REAL_LOGS = {
    # group-committed AlterPartitions, a failover, a reassignment completed by an
    # ISR change
    "demo-log": (6000, 1),
    # `make demo` with its outage (steps 8-9): two brokers killed at once, the
    # partitions offline with ELR on, a broker back outside their ISRs
    "demo-outage-log": (6000, 3),
    # `make test`'s chaos run: kills, SIGSTOPs, partitions of the quorum, topics
    # created and deleted meanwhile (a delete group-committed with an
    # AlterPartition of another topic: both are facts)
    "chaos-plain-log": (6000, 6),
    "chaos-secure-log": (6000, 4),
}


@pytest.mark.parametrize("name", sorted(REAL_LOGS))
def test_in_force_replay_of_a_real_cluster_log_rewrites_it_batch_for_batch(
    name: str, tmp_path: Path
) -> None:
    log = FIXTURES / name
    session_ms, fences = REAL_LOGS[name]
    facts = read_facts(log, session_ms)
    [in_force] = build_scenarios([], in_force=[f"broker.session.timeout.ms={session_ms}"])
    tables, stats = scenario_tables(facts, in_force, tmp_path / "w", keep_log=True)
    assert stats["refused"] == {} and stats["skipped"] == {} and stats["fences"] == fences
    assert _records(tmp_path / "w" / "log") == _records(log)
    actual = history_tables(log, tmp_path / "actual")
    for table_name, table in actual.items():
        mine = tables[table_name].drop_columns(["scenario"]).to_pylist()
        assert mine == table.to_pylist(), table_name
    assert actual["leader_elections"].num_rows > 0
