"""`whatif_bench.isr_change_runs`, the figure behind docs/what-if.md's
"Riding re-examined", on a hand-made log with a known answer: which lone ISR
changes form a run, and which runs another record of their partition ends."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType, SimpleNamespace

from metadata_log.records import (
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
)

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "whatif_bench.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("whatif_bench_under_test", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _batch(*records: object) -> SimpleNamespace:
    return SimpleNamespace(records=list(records))


def _isr(topic: str, pid: int, isr: tuple[int, ...]) -> PartitionChangeRecord:
    return PartitionChangeRecord(topic, pid, isr=isr)


def test_runs_of_isr_changes_and_the_records_that_end_them() -> None:
    a, b = "topic-a", "topic-b"
    batches = [
        _batch(PartitionRecord(a, 0, replicas=(1, 2), isr=(1, 2), leader=1)),
        _batch(_isr(a, 0, (1,))),  # run 1 of a-0
        _batch(_isr(b, 0, (2,))),  # run of b-0, never ended
        _batch(_isr(a, 0, (1, 2))),  # still run 1: nothing else of a-0 between
        # a fence's changes: one ends a-0's run, b-1 had none open
        _batch(
            FenceBrokerRecord(2, 5),
            PartitionChangeRecord(a, 0, isr=(1,)),
            PartitionChangeRecord(b, 1, isr=(3,)),
        ),
        _batch(_isr(a, 0, (1, 2))),  # run 2 of a-0
        # not lone ISR changes: a leader move, a replica change, two in one batch
        _batch(PartitionChangeRecord(a, 1, isr=(1,), leader=1)),
        _batch(PartitionChangeRecord(a, 2, isr=(1,), replicas=(1, 3))),
        _batch(_isr(a, 3, (1,)), _isr(a, 4, (1,))),
        _batch(_isr(a, 0, (1,))),  # run 2 goes on
    ]
    assert _bench().isr_change_runs(batches) == {
        "isr_changes": 5,
        "runs": 3,
        "runs_ended_by_another_record": 1,
    }
