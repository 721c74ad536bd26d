"""`kraft dump-log`: every record in JSON, torn tails end the data, corruption is an error.

Run as the user runs it: `python -m kraft.cli` and the installed `kraft` console script.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from metadata_log.batch import decode_batches, encode_batch
from metadata_log.records import record_fields
from metadata_log.replay import METADATA_DIR_NAME
from metadata_log.snapshot import list_snapshots
from tests.cluster_story import cluster_story, story_image
from tests.story_demo import main as story_demo

KRAFT_SCRIPT = Path(sys.executable).parent / "kraft"


def run(*args: str, script: bool = False) -> subprocess.CompletedProcess[str]:
    cmd = [str(KRAFT_SCRIPT)] if script else [sys.executable, "-m", "kraft.cli"]
    return subprocess.run(
        [*cmd, "dump-log", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def story_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    batches = cluster_story()
    d = tmp_path_factory.mktemp("data") / "__cluster_metadata-0"
    d.mkdir()
    f = d / "00000000000000000000.log"
    f.write_bytes(
        b"".join(
            encode_batch(b.base_offset, b.leader_epoch, b.append_time_ms, b.records, b.control)
            for b in batches
        )
    )
    return f, batches


def test_json_prints_every_record(story_log) -> None:
    f, batches = story_log
    res = run(str(f.parent.parent), "--json")
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    expected = [
        (b.base_offset + i, type(r).__name__) for b in batches for i, r in enumerate(b.records)
    ]
    assert [(r["offset"], r["type"]) for r in rows] == expected
    fence = next(r for r in rows if r["type"] == "FenceBrokerRecord")
    assert fence["fields"] == {"id": 1, "epoch": 2}
    assert set(fence) == {
        "offset",
        "base_offset",
        "epoch",
        "append_time_ms",
        "control",
        "type",
        "fields",
    }
    assert rows[0]["control"] is True and rows[0]["type"] == "LeaderChangeMessage"


def test_from_offset(story_log) -> None:
    f, _ = story_log
    res = run(str(f), "--json", "--from-offset", "20")
    offsets = [json.loads(line)["offset"] for line in res.stdout.splitlines()]
    assert offsets[0] == 20 and offsets == list(range(20, 27))


def test_text_output_has_batch_headers(story_log) -> None:
    f, _ = story_log
    res = run(str(f))
    assert res.returncode == 0
    assert "baseOffset: 13 lastOffset: 16 count: 4" in res.stdout
    assert "| offset: 16 FenceBrokerRecord" in res.stdout


def test_incomplete_last_batch_is_end_of_data(story_log, tmp_path: Path) -> None:
    f, _ = story_log
    data = f.read_bytes()
    torn = tmp_path / "00000000000000000000.log"
    torn.write_bytes(data[:-5])
    res = run(str(torn), "--json")
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.splitlines()) == 26  # the last batch (1 NoOp) is cut
    # the JSON lines just stop: stderr says where and why (it said nothing)
    (warning,) = res.stderr.splitlines()
    assert warning.startswith(f"kraft dump-log: warning: {torn}: end of data at position ")


def test_corrupt_batch_fails_naming_file_and_offset(story_log, tmp_path: Path) -> None:
    f, batches = story_log
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x40
    bad = tmp_path / "00000000000000000000.log"
    bad.write_bytes(bytes(data))
    res = run(str(bad), "--json")
    assert res.returncode != 0
    assert str(bad) in res.stderr and "offset" in res.stderr
    assert "Traceback" not in res.stderr


def test_missing_path_is_a_clear_error(tmp_path: Path) -> None:
    res = run(str(tmp_path / "nope"))
    assert res.returncode != 0 and "no such file or directory" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The offline story demo's data dir: a real FileLog plus a snapshot of the image."""
    d = tmp_path_factory.mktemp("demo")
    assert story_demo(["--data-dir", str(d)]) == 0
    return d


def test_console_script_prints_every_record_of_the_story_log(demo_dir: Path) -> None:
    """Every record of the FileLog the demo wrote, in DESIGN 1.2's shape, then the snapshot's."""
    assert KRAFT_SCRIPT.exists(), f"{KRAFT_SCRIPT} is missing: run `make install`"
    batches = cluster_story()
    res = run(str(demo_dir), "--json", script=True)
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    (snap_id,) = list_snapshots(demo_dir / METADATA_DIR_NAME)
    image = story_image(batches)
    snap_records = list(image.to_records())
    # The snapshot comes first (header, the image's records, footer), then the segment.
    n_snap = len(snap_records) + 2
    snap_rows, log_rows = rows[:n_snap], rows[n_snap:]
    assert [r["type"] for r in snap_rows] == [
        "SnapshotHeader",
        *(type(r).__name__ for r in snap_records),
        "SnapshotFooter",
    ]
    assert {r["epoch"] for r in snap_rows} == {snap_id.epoch}
    assert [r["fields"] for r in snap_rows[1:-1]] == [record_fields(r) for r in snap_records]
    expected = [
        {
            "offset": b.base_offset + i,
            "base_offset": b.base_offset,
            "epoch": b.leader_epoch,
            "append_time_ms": b.append_time_ms,
            "control": b.control,
            "type": type(r).__name__,
            "fields": record_fields(r),
        }
        for b in batches
        for i, r in enumerate(b.records)
    ]
    assert log_rows == expected
    # Field values are plain JSON: e.g. a registration's endpoints are objects.
    reg = next(r for r in log_rows if r["type"] == "RegisterBrokerRecord")
    assert reg["fields"]["endpoints"] == [
        {"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9092, "security_protocol": "PLAINTEXT"}
    ]


def test_console_script_corrupt_segment_names_file_and_batch_offset(
    demo_dir: Path, tmp_path: Path
) -> None:
    assert KRAFT_SCRIPT.exists(), f"{KRAFT_SCRIPT} is missing: run `make install`"
    seg = demo_dir / METADATA_DIR_NAME / "00000000000000000000.log"
    data = seg.read_bytes()
    batches = decode_batches(data)
    # Damage the length field of the batch at offset 13 (a complete batch mid-file).
    pos = sum(len(b.encode()) for b in batches if b.base_offset < 13)
    assert decode_batches(data[pos:])[0].base_offset == 13
    bad = bytearray(data)
    bad[pos + 10] ^= 0x01
    target = tmp_path / seg.name
    target.write_bytes(bytes(bad))
    for script in (True, False):
        res = run(str(target), "--json", script=script)
        assert res.returncode == 1
        assert f"{target} at offset 13 (file position {pos})" in res.stderr
        assert "Traceback" not in res.stderr
        # What came before the damage was printed.
        assert [json.loads(line)["offset"] for line in res.stdout.splitlines()] == list(range(13))


def test_undecodable_record_names_file_and_offset(tmp_path: Path) -> None:
    import msgpack

    from metadata_log.batch import encode_payload
    from metadata_log.records import NoOpRecord, encode_record

    payload = encode_record(NoOpRecord()) + msgpack.packb([77, 0])
    f = tmp_path / "00000000000000000000.log"
    f.write_bytes(encode_batch(0, 1, 0, [NoOpRecord()]) + encode_payload(1, 1, 0, payload, 2))
    res = run(str(f), "--json")
    assert res.returncode == 1
    assert f"{f} at offset 2: unknown record type 77" in res.stderr
    assert "Traceback" not in res.stderr


def test_unreadable_segment_is_a_clear_error(tmp_path: Path) -> None:
    """An OSError while reading (here: a segment name that is a directory) is no traceback."""
    (tmp_path / "00000000000000000000.log").mkdir()
    res = run(str(tmp_path))
    assert res.returncode == 1 and "is a directory, not a regular file" in res.stderr
    assert "00000000000000000000.log" in res.stderr
    assert "Traceback" not in res.stderr
