"""Identity: replayed with the settings in force, the facts give back the log.

For seeded generator stories (crashes, restarts, controlled shutdowns, ISR
shrinks and expansions, admin elections, unclean election enabled on a topic,
failovers, aborted transactions), the counterfactual log equals the actual one
record for record, so leader_elections and offline_partitions are equal row for
row. No row is pinned as unrecoverable for these stories.
"""

from __future__ import annotations

from pathlib import Path

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


def test_the_engines_direct_paths_write_the_general_paths_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone AlterPartition unit and a one-record result take a direct path in
    the engine: under scenarios that change what the controller decides (so the
    partitions' results differ from the log's), the counterfactual log is the
    one the general path writes, byte for byte, with the same stats."""
    from spark_replay.whatif.engine import Engine, run_scenario

    class Sink:
        def __init__(self) -> None:
            self.next_offset, self.batches = 0, []

        def append(self, batch: bytes, record_count: int) -> None:
            self.batches.append(batch)
            self.next_offset += record_count

    log = tmp_path / "data"
    generate(log, scaled_config(3000, 7, failover_rate=0.02, admin_rate=0.05))
    facts = read_facts(log, 9000)
    sets = ["unclean.leader.election.enable=true", "broker.session.timeout.ms=3000"]
    scenarios = [build_scenarios([s])[1] for s in sets]
    scenarios.append(build_scenarios(["replica.placement=rack-unaware"])[1])
    logs = []
    for scenario in [*build_scenarios([])[:1], *scenarios]:
        runs = []
        for direct in (True, False):
            monkeypatch.setattr(Engine, "DIRECT_PATHS", direct)
            sink = Sink()
            stats = run_scenario(facts, scenario, sink)
            runs.append((sink.batches, stats.to_dict()))
        assert runs[0] == runs[1], scenario.name
        assert len(runs[0][0]) > 500
        logs.append(runs[0][0])
    assert all(other != logs[0] for other in logs[1:])  # each scenario decided otherwise


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
