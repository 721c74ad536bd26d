"""`kraft dump-log` says where a log is not whole, dumps on, and exits 1.

A missing middle segment, a batch cut out of a Kafka segment, a torn segment that
is not the last, a log that starts after its newest snapshot, a torn snapshot and
a snapshot without its SnapshotFooter; a whole log, and a torn tail of the last
segment (a live log mid-append), stay exit 0.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kraft.tools.dump_log import iter_file, run
from metadata_log.batch import encode_batch
from metadata_log.kafka.writer import write_kafka_log
from metadata_log.replay import METADATA_DIR_NAME
from tests.cluster_story import cluster_story

KAFKA_3X = Path(__file__).resolve().parents[2] / "fixtures" / "kafka" / "kafka-3x-datadir"


def _segment_name(base: int) -> str:
    return f"{base:020d}.log"


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The story log in three segments, natively and in Kafka's format."""
    batches = cluster_story()
    cuts = [0, len(batches) // 3, 2 * len(batches) // 3, len(batches)]
    native = tmp_path_factory.mktemp("native")
    d = native / METADATA_DIR_NAME
    d.mkdir()
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        part = batches[lo:hi]
        (d / _segment_name(part[0].base_offset)).write_bytes(
            b"".join(
                encode_batch(b.base_offset, b.leader_epoch, b.append_time_ms, b.records, b.control)
                for b in part
            )
        )
    kafka = tmp_path_factory.mktemp("kafka")
    write_kafka_log(native, kafka)
    return {"native": native, "kafka": kafka}


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


def _segments(log: Path) -> list[Path]:
    return sorted((log / METADATA_DIR_NAME).glob("*.log"))


def _dump(capsys: Any, *args: str) -> tuple[int, list[dict[str, Any]], list[str]]:
    code = run(args[0], as_json=True, fmt="auto")
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines()], err.splitlines()


@pytest.mark.parametrize("fmt", ["native", "kafka"])
def test_a_whole_log_in_several_segments_is_exit_0(logs, capsys, fmt: str) -> None:
    code, rows, err = _dump(capsys, str(logs[fmt]))
    assert (code, err) == (0, [])
    assert [r["offset"] for r in rows] == list(range(len(rows)))


@pytest.mark.parametrize("fmt", ["native", "kafka"])
def test_a_missing_middle_segment_is_named_and_the_dump_goes_on(
    logs, capsys, tmp_path: Path, fmt: str
) -> None:
    log = _copy(logs[fmt], tmp_path)
    first, middle, last = _segments(log)
    lost_from, lost_to = int(middle.name[:20]), int(last.name[:20]) - 1
    middle.unlink()
    code, rows, err = _dump(capsys, str(log))
    assert code == 1
    offsets = [r["offset"] for r in rows]
    assert offsets == [o for o in range(offsets[-1] + 1) if not lost_from <= o <= lost_to]
    assert err[0] == (
        f"kraft dump-log: warning: gap in the log: the segment before {last.name} ends at "
        f"offset {lost_from - 1}, {last.name} starts at {lost_to + 1}: "
        f"offsets {lost_from}-{lost_to} are missing"
    )
    assert err[-1].startswith("kraft dump-log: error: the log is not whole: gap in the log")
    # the text dump says it in place, between the two segments' records
    code = run(str(log))
    text = capsys.readouterr().out
    assert code == 1
    warning = text.index(f"Warning: gap in the log: the segment before {last.name}")
    assert text.index(f"Dumping {first}") < warning < text.index(f"| offset: {lost_to + 1} ")


def test_a_batch_cut_out_of_a_kafka_segment_is_a_gap(logs, capsys, tmp_path: Path) -> None:
    log = _copy(logs["kafka"], tmp_path)
    seg = _segments(log)[0]
    batches = [b for b in iter_file(seg) if not isinstance(b, Exception)]
    assert len(batches) >= 3
    data = seg.read_bytes()
    cut = batches[1]
    seg.write_bytes(data[: cut.position] + data[batches[2].position :])
    code, rows, err = _dump(capsys, str(log))
    assert code == 1
    assert cut.base_offset not in {r["offset"] for r in rows}
    assert err[0] == (
        f"kraft dump-log: warning: {seg}: gap at position {cut.position}: the batch at offset "
        f"{cut.last_offset + 1} follows offset {cut.base_offset - 1}: "
        + (
            f"offset {cut.base_offset} is missing"
            if cut.last_offset == cut.base_offset
            else f"offsets {cut.base_offset}-{cut.last_offset} are missing"
        )
    )


def test_a_leader_epoch_that_goes_back_is_named(logs, capsys, tmp_path: Path) -> None:
    """Kafka's batch CRC does not cover the partition leader epoch (bytes 12-15): a
    flipped bit there is seen only as an epoch lower than the one before it."""
    log = _copy(logs["kafka"], tmp_path)
    seg = _segments(log)[-1]
    batches = [b for b in iter_file(seg) if not isinstance(b, Exception)]
    b = batches[len(batches) // 2]
    assert b.epoch >= 1
    data = bytearray(seg.read_bytes())
    data[b.position + 12 : b.position + 16] = (b.epoch - 1).to_bytes(4, "big")
    seg.write_bytes(bytes(data))
    code, rows, err = _dump(capsys, str(log))
    assert code == 1
    assert [r["epoch"] for r in rows if r["base_offset"] == b.base_offset][0] == b.epoch - 1
    assert err[0] == (
        f"kraft dump-log: warning: {seg}: the batch at offset {b.base_offset} (position "
        f"{b.position}) has leader epoch {b.epoch - 1}, below the {b.epoch} before it: a "
        "log's epochs never go back"
    )


@pytest.mark.parametrize("fmt", ["native", "kafka"])
def test_a_torn_segment_that_is_not_the_last_is_not_whole(
    logs, capsys, tmp_path: Path, fmt: str
) -> None:
    log = _copy(logs[fmt], tmp_path)
    middle = _segments(log)[1]
    middle.write_bytes(middle.read_bytes()[:-7])
    code, rows, err = _dump(capsys, str(log))
    assert code == 1
    assert err[0].startswith(
        f"kraft dump-log: warning: {middle}: this segment, not the last one, is torn at position "
    )
    # the batch cut short is missing, and the next segment is dumped after it
    assert any("gap in the log" in line for line in err)
    assert rows[-1]["offset"] == max(r["offset"] for r in rows)


@pytest.mark.parametrize("fmt", ["native", "kafka"])
def test_a_torn_tail_of_the_last_segment_is_still_end_of_data(
    logs, capsys, tmp_path: Path, fmt: str
) -> None:
    log = _copy(logs[fmt], tmp_path)
    last = _segments(log)[-1]
    last.write_bytes(last.read_bytes()[:-7])
    code, _rows, err = _dump(capsys, str(log))
    assert code == 0
    (warning,) = err
    assert warning.startswith(f"kraft dump-log: warning: {last}: end of data at position ")


def test_a_log_that_starts_after_its_snapshot_is_not_whole(logs, capsys, tmp_path: Path) -> None:
    log = _copy(logs["native"], tmp_path)
    first, second, _last = _segments(log)
    first.unlink()
    code, rows, err = _dump(capsys, str(log))
    base = int(second.name[:20])
    assert code == 1 and rows[0]["offset"] == base
    assert err[0] == (
        f"kraft dump-log: warning: {second}: the log starts at offset {base}: "
        f"offsets 0-{base - 1} are missing"
    )


def test_a_snapshot_torn_or_without_its_footer_is_not_whole(capsys, tmp_path: Path) -> None:
    good = KAFKA_3X / "bootstrap.checkpoint"
    code, rows, err = _dump(capsys, str(good))
    assert (code, err) == (0, [])
    assert rows[-1]["type"] == "SnapshotFooterRecord"
    batches = [b for b in iter_file(good) if not isinstance(b, Exception)]
    data = good.read_bytes()

    no_footer = tmp_path / "a" / "bootstrap.checkpoint"
    no_footer.parent.mkdir()
    no_footer.write_bytes(data[: batches[-1].position])
    code, rows, err = _dump(capsys, str(no_footer))
    assert code == 1 and "SnapshotFooterRecord" not in {r["type"] for r in rows}
    assert err[0] == (
        f"kraft dump-log: warning: {no_footer}: the snapshot has no SnapshotFooter: "
        "it was not written whole"
    )

    torn = tmp_path / "b" / "bootstrap.checkpoint"
    torn.parent.mkdir()
    torn.write_bytes(data[:-3])
    code, _rows, err = _dump(capsys, str(torn))
    assert code == 1
    assert err[0].startswith(f"kraft dump-log: warning: {torn}: this snapshot is torn at position ")
    assert err[-1].startswith("kraft dump-log: error: the log is not whole: ")


def test_a_snapshot_with_data_after_its_footer_is_not_whole(capsys, tmp_path: Path) -> None:
    data = (KAFKA_3X / "bootstrap.checkpoint").read_bytes()
    twice = tmp_path / "bootstrap.checkpoint"
    twice.write_bytes(data + data)  # every row shown twice, offsets from 0 again
    code, rows, err = _dump(capsys, str(twice))
    assert code == 1 and len(rows) == 2 * len({r["offset"] for r in rows})
    # the words of every snapshot reader (metadata_log.snapshot.SnapshotOrder)
    assert err == [
        f"kraft dump-log: warning: {twice}: data after the snapshot footer at offset 0",
        f"kraft dump-log: error: the log is not whole: {twice}: data after the snapshot "
        "footer at offset 0",
    ]


@pytest.mark.parametrize("fmt", ["native", "kafka"])
def test_a_misnamed_segment_is_named_as_such_not_as_a_gap(
    logs, capsys, tmp_path: Path, fmt: str
) -> None:
    log = _copy(logs[fmt], tmp_path)
    _first, middle, _last = _segments(log)
    base = int(middle.name[:20])
    misnamed = middle.with_name(_segment_name(base - 1))
    middle.rename(misnamed)
    code, rows, err = _dump(capsys, str(log))
    assert code == 1
    assert [r["offset"] for r in rows] == list(range(len(rows)))  # nothing missing
    assert err == [
        f"kraft dump-log: warning: {misnamed}: the segment's name says it starts at offset "
        f"{base - 1}, its first batch is at offset {base}: the file is misnamed",
        f"kraft dump-log: error: the log is not whole: {misnamed}: the segment's name says it "
        f"starts at offset {base - 1}, its first batch is at offset {base}: the file is misnamed",
    ]


@pytest.mark.parametrize("fmt", ["native", "kafka"])
def test_a_segment_copied_under_another_name_is_named_as_overlapping(
    logs, capsys, tmp_path: Path, fmt: str
) -> None:
    log = _copy(logs[fmt], tmp_path)
    _first, middle, last = _segments(log)
    base, end = int(middle.name[:20]), int(last.name[:20]) - 1
    copy = middle.with_name(_segment_name(base + 1))
    shutil.copyfile(middle, copy)
    code, _rows, err = _dump(capsys, str(log))
    assert code == 1
    assert err[:2] == [
        f"kraft dump-log: warning: {copy}: the segment's name says it starts at offset "
        f"{base + 1}, its first batch is at offset {base}: the file is misnamed",
        f"kraft dump-log: warning: {copy}: overlapping segments: {copy.name} starts at offset "
        f"{base}, the segment before it ends at offset {end}: the offsets from {base} on are "
        "read twice",
    ]
    assert len(err) == 3  # the last segment follows the copy without a gap
