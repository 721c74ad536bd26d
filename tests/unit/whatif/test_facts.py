"""Facts and figures: broker liveness as the records imply it, the offline
figures of a table, and the commands a log turns back into."""

from __future__ import annotations

import gc
import os
import signal
from pathlib import Path

import pyarrow as pa
import pytest

from metadata_log.errors import MetadataLogError
from spark_replay.whatif import facts as F
from spark_replay.whatif.metrics import offline_steps, scenario_metrics
from tests.unit.whatif.story import T0, Story


def test_a_fence_means_the_broker_went_silent_one_session_before() -> None:
    live = F.Liveness(9000)
    live.up(1, 1000)
    live.down(1, 50_000 - 9000)  # a FenceBrokerRecord at 50 s
    live.up(1, 70_000)  # heard from again
    assert live.alive(1, 40_000, cs=True)
    assert not live.alive(1, 41_000, cs=True)
    assert live.silent_since(1, 60_000, cs=True) == 41_000
    assert live.alive_until(1, 2000, cs=True) == 41_000
    assert live.alive(1, 70_000, cs=True) and live.alive_until(1, 70_000, cs=True) is None


def test_a_second_silence_does_not_move_the_first() -> None:
    live = F.Liveness(9000)
    live.up(2, 0)
    live.down(2, 10_000)  # fenced: silent since 10 s
    live.down(2, 19_000)  # then unregistered
    assert live.silent_since(2, 30_000, cs=True) == 10_000


def test_controlled_shutdown_off_stops_the_broker_when_it_asks() -> None:
    live = F.Liveness(9000)
    live.up(3, 0)
    live.down(3, 5000, controlled_shutdown=False)  # asked at 5 s
    live.down(3, 8000, controlled_shutdown=True)  # told to shut down at 8 s
    assert live.alive(3, 6000, cs=True) and not live.alive(3, 6000, cs=False)


def test_offline_figures_count_an_open_window_to_the_end() -> None:
    offline = pa.table(
        {
            "topic": ["a", "a", "b"],
            "topic_id": ["x", "x", "y"],
            "partition_id": [0, 1, 0],
            "start_offset": [1, 2, 3],
            "end_offset": [5, None, 4],
            "start_time_ms": [1000, 2000, 3000],
            "end_time_ms": [5000, None, 4000],
        }
    )
    elections = pa.table(
        {
            "offset": [1, 9],
            "topic": ["a", "b"],
            "partition_id": [0, 0],
            "old_leader": [1, 2],
            "new_leader": [2, 3],
            "unclean": [False, True],
            "cause": ["FENCE", "ADMIN"],
        }
    )
    assert offline_steps(offline, 10_000) == [(1000, 1), (2000, 2), (3000, 3), (4000, 2), (5000, 1)]
    m = scenario_metrics(elections, offline, 0, 10_000)
    assert m["offline_partition_seconds"] == 4 + 8 + 1
    assert m["max_offline_at_once"] == 3
    assert m["offline_seconds_by_topic"] == {"a": 12.0, "b": 1.0}
    assert (m["unclean_elections"], m["leadership_moves"]) == (1, 2)
    assert m["unclean_at"] == [{"topic": "b", "partition_id": 0, "offset": 9}]


def test_a_log_turns_back_into_its_commands(tmp_path: Path) -> None:
    s = Story(tmp_path / "log")
    for b in (1, 2):
        s.register(b)
    s.run_until(T0 + 3000)
    tid = s.create_topic("t", [(1, 2)])
    s.shrink_isr(tid, 0, (1,))
    s.stop(1)
    s.run_until(T0 + 20_000)
    facts = F.read_facts(s.close(), 9000)
    kinds = [type(c).__name__ for u in facts.units for c in u.commands]
    assert kinds == [
        "Failover",
        "Register",
        "Unfence",
        "Register",
        "Unfence",
        "CreateTopic",
        "AlterIsr",
        "FenceMark",
    ]
    [fence] = [u for u in facts.units if any(type(c) is F.FenceMark for c in u.commands)]
    assert facts.liveness.silent_since(1, fence.time_ms, cs=True) == fence.time_ms - 9000
    # the leader's AlterPartition, alone in its batch: the compact unit, which
    # gives back the batch's shape and the command the full form holds
    [isr] = [u for u in facts.units if type(u) is F.IsrUnit]
    [batch] = isr.batches
    assert (batch.base_offset, batch.time_ms, batch.records) == (isr.offset, isr.time_ms, ())
    assert isr.commands == (F.AlterIsr(tid, 0, (1, 2), (1,), -1),)
    assert not isr.copy and not isr.unexplained and facts.command_count == len(kinds)


def test_facts_survive_the_pickle_the_workers_load(tmp_path: Path) -> None:
    """Units, batches and ISR facts pickle as (class, fields): equal after a
    round trip through the job's save/load, which a worker does once per job
    (frozen out of the collector) and again when the file changes."""
    from spark_replay.generator import generate, scaled_config
    from spark_replay.whatif import replay
    from spark_replay.whatif.replay import load_facts, save_facts

    generate(tmp_path / "data", scaled_config(1500, 2, admin_rate=0.05))
    facts = F.read_facts(tmp_path / "data", 9000)
    assert gc.isenabled()  # the collector is off only while the facts are read
    save_facts(facts, tmp_path / "facts.pickle")
    try:
        back = load_facts(tmp_path / "facts.pickle")
        assert back is not facts and back.units == facts.units
        assert any(type(c) is F.AlterIsr for u in back.units for c in u.commands)
        assert back.liveness._on == facts.liveness._on and back.racks == facts.racks
        # loaded once per worker and kept out of the collector's walks
        assert gc.isenabled() and gc.get_freeze_count() > 0
        assert load_facts(tmp_path / "facts.pickle") is back
        # another job's facts replace them; the old ones are collectable again
        save_facts(facts, tmp_path / "facts.pickle")
        os.utime(tmp_path / "facts.pickle", ns=(1, 1))
        again = load_facts(tmp_path / "facts.pickle")
        assert again is not back and again.units == facts.units
        assert list(replay._LOADED.values()) == [again]
    finally:
        replay._LOADED.clear()
        gc.unfreeze()  # this test process's heap, frozen by the worker's rule


def test_a_topic_command_group_committed_with_an_alter_partition_keeps_both() -> None:
    """A real cluster's group commit put a topic deletion and another topic's
    AlterPartition in one batch (tests/fixtures/whatif/chaos-plain-log): a topic
    command writes no partition change, so the change is a fact of its own,
    and the commands keep the order of their records."""
    from metadata_log.image import MetadataImage
    from metadata_log.records import (
        PartitionChangeRecord,
        PartitionRecord,
        RemoveTopicRecord,
        TopicRecord,
    )

    image = MetadataImage()
    for offset, r in enumerate(
        [
            TopicRecord("gone", "T-gone"),
            PartitionRecord("T-gone", 0, (1, 2), (1, 2), leader=1),
            TopicRecord("kept", "T-kept"),
            PartitionRecord("T-kept", 0, (1, 2), (1, 2), leader=1),
        ]
    ):
        image.replay(r, offset)
    delete, shrink = RemoveTopicRecord("T-gone"), PartitionChangeRecord("T-kept", 0, isr=(1,))

    def commands(records: list) -> tuple:
        cmds, unexplained = F._commands(records, image, T0, F.Liveness(9000), set(), {}, set())
        assert unexplained == 0
        return cmds

    alter = F.AlterIsr("T-kept", 0, (1, 2), (1,), -1)
    assert commands([delete, shrink]) == (F.DeleteTopic("T-gone"), alter)
    assert commands([shrink, delete]) == (alter, F.DeleteTopic("T-gone"))


def test_a_fifo_named_like_a_segment_is_one_error_not_a_hang(tmp_path: Path) -> None:
    """read_facts opened segments with read_bytes(): a FIFO blocked it forever."""
    d = tmp_path / "__cluster_metadata-0"
    d.mkdir()
    os.mkfifo(d / "00000000000000000000.log")

    def blocked(*_args: object) -> None:
        raise TimeoutError("read_facts blocked")

    old = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(5)
    try:
        with pytest.raises(MetadataLogError, match="is a FIFO, not a regular file"):
            F.read_facts(tmp_path, 6000)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
