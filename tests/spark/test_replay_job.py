"""spark_replay.replay_job's planning, without Spark: which offsets and
transactions each file replays, and when the records stage's own summary of a
file can be used (its plan equals the driver's)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from spark_replay.decode import LogFile
from spark_replay.history import Transaction, _make_info
from spark_replay.records import stats_from_dict
from spark_replay.replay_job import SerialRunner, own_plan, plan_files
from spark_replay.segment_replay import Txn

BEGIN, END, ABORT = "BeginTransactionRecord", "EndTransactionRecord", "AbortTransactionRecord"


def stats(path: str, first: int, last: int, markers: list[tuple[int, str]]) -> dict[str, Any]:
    return {
        "path": path,
        "source": "segment",
        "snapshot_end_offset": None,
        "records": last - first + 1,
        "first_offset": first,
        "last_offset": last,
        "first_time_ms": first,
        "last_time_ms": last,
        "max_epoch": 1,
        "by_type": {},
        "markers": [(o, kind, 1000 + o, 1, "{}") for o, kind in markers],
    }


def test_a_file_tells_its_own_plan_only_when_its_transactions_are_whole() -> None:
    whole = own_plan(0, stats("a", 0, 99, [(10, BEGIN), (12, END), (20, BEGIN), (22, ABORT)]), "/r")
    assert whole is not None
    assert (whole.lo, whole.hi) == (0, 99)
    assert whole.txns == (Txn(10, 12, True, 1012), Txn(20, 22, False, 1022))
    assert own_plan(0, stats("a", 0, 99, [(90, BEGIN)]), "/r") is None  # ends in a later file
    assert own_plan(0, stats("a", 100, 199, [(105, END)]), "/r") is None  # began earlier
    assert own_plan(0, {**stats("a", 0, 9, []), "source": "snapshot"}, "/r") is None


def test_a_transaction_across_files_is_replayed_by_the_file_of_its_end(tmp_path: Path) -> None:
    files = [
        LogFile(str(tmp_path / f"{b:020d}.log"), "segment", b, None, b == 200)
        for b in (0, 100, 200)
    ]
    raw = [
        stats(files[0].path, 0, 99, [(90, BEGIN)]),
        stats(files[1].path, 100, 199, []),  # inside the transaction: no marker at all
        stats(files[2].path, 200, 299, [(205, END)]),
    ]
    st = [stats_from_dict(s) for s in raw]
    info = _make_info(0, 299, 0, 299, 300, [], [(90, BEGIN, 1090), (205, END, 1205)])
    assert info.transactions == [Transaction(90, 205, True, 1205)]
    plans = plan_files(files, st, info, tmp_path)
    assert [(p.lo, p.hi) for p in plans] == [(0, 99), (100, 199), (200, 299)]
    assert all(p.txns == (Txn(90, 205, True, 1205),) for p in plans)
    # its rows before the last file are read from the earlier parts by the last file
    assert [(Path(x[0]).name, x[1], x[2]) for x in plans[2].extra] == [
        ("part-00000.parquet", 91, 99),
        ("part-00001.parquet", 100, 199),
    ]
    # none of the three can tell its plan alone: the driver prepares them again
    for i, s in enumerate(raw):
        own = own_plan(i, s, str(tmp_path))
        assert own is None or replace(own, weight=0) != replace(plans[i], weight=0)
    # a file with whole transactions tells the driver's plan exactly
    alone = [stats(files[0].path, 0, 99, [(10, BEGIN), (12, END)])]
    info = _make_info(0, 99, 0, 99, 100, [], [(10, BEGIN, 1010), (12, END, 1012)])
    plan = plan_files(files[:1], [stats_from_dict(alone[0])], info, tmp_path)[0]
    assert replace(own_plan(0, alone[0], str(tmp_path)), weight=0) == replace(plan, weight=0)  # type: ignore[arg-type]


def _table_rows(out: Path) -> dict[str, list[tuple[Any, ...]]]:
    import pyarrow.parquet as pq

    from spark_replay.tables import TABLE_COLUMNS

    return {
        name: sorted(map(tuple, pq.read_table(out / name).select(list(cols)).to_pylist()), key=repr)
        for name, cols in TABLE_COLUMNS.items()
    }


def test_files_replayed_before_the_records_stage_ends_write_the_barrier_tables(
    tmp_path: Path,
) -> None:
    """replay_log replays a file as soon as the files before it are summarized,
    its rows that end in a later file closed at the end; with early replays off
    (the before_history hook: every replay after the whole records stage) the
    tables are the same. A story whose metadata transactions cross segments
    stops the early replays at the first such file."""
    from spark_replay.datasource import list_log_files
    from spark_replay.generator import GeneratorConfig, generate
    from spark_replay.replay_job import replay_log

    stories = {
        "plain": GeneratorConfig(records=6_000, seed=3, segment_bytes=48 * 1024),
        "transactions": GeneratorConfig(
            records=4_000, seed=12, max_batch_bytes=600, failover_rate=0.01, segment_bytes=16_384
        ),
    }
    for name, cfg in stories.items():
        data = tmp_path / name
        generate(data, cfg)
        files = list_log_files(data)
        assert len(files) >= 3, name
        early = replay_log(SerialRunner(), files, tmp_path / f"{name}-early", progress=print)
        late = replay_log(
            SerialRunner(), files, tmp_path / f"{name}-late", before_history=lambda _i: None
        )
        assert late.early_replays == 0
        # a transaction crossing files holds their replays only until its end
        # is read: every file up to the last with no transaction open at its
        # end is replayed early, also those that cannot tell their own plan
        leading, closed, txn_open = 0, 0, False
        for i, st in enumerate(early.stats):
            own = own_plan(i, st.to_dict(), str(tmp_path / f"{name}-early" / "records"))
            leading += own is not None and leading == i
            for _o, kind, *_r in sorted(st.markers):
                txn_open = kind == BEGIN or (txn_open and kind not in (END, ABORT))
            closed = closed if txn_open else i + 1
        assert leading < closed, name  # a transaction crosses two of the files
        assert early.early_replays == closed, name
        got, want = _table_rows(tmp_path / f"{name}-early"), _table_rows(tmp_path / f"{name}-late")
        assert all(want[t] for t in want), name
        assert got == want, name
        # a Spark runner's tasks hand their summaries and open rows over through
        # files under OUT/_work (removed at the end): the same tables
        files_out = tmp_path / f"{name}-via-files"
        via = replay_log(_ViaFiles(), files, files_out, progress=print)
        assert via.early_replays == closed, name
        assert _table_rows(files_out) == want, name
        assert not (files_out / "_work").exists(), name


class _ViaFiles(SerialRunner):
    """SerialRunner with SparkRunner's hand-over of results through files."""

    via_files = True
