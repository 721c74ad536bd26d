"""`kraft dump-log`: every record in JSON, torn tails end the data, corruption is an error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kraft.story import cluster_story
from metadata_log.batch import encode_batch


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kraft.cli", "dump-log", *args],
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
