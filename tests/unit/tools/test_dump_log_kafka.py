"""`kraft dump-log` on Kafka logs: bad input is a clear error naming file and
offset (non-zero exit, no traceback), a torn tail is the end of data, other files
of the folder are passed over, unknown records stop the dump unless
--skip-unknown counts them, and the log is only read."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kraft.tools import dump_log
from metadata_log.kafka.schemas import METADATA_SCHEMAS
from tests.unit.metadata_log.kafka import wire_encoder

FIXTURE = Path(__file__).parents[2] / "fixtures" / "kafka" / "ldi-poc"
SEGMENT_NAME = "00000000000000000000.log"


def dump(*args: str, prelude: str = "") -> subprocess.CompletedProcess[str]:
    code = f"import sys\n{prelude}\nfrom kraft.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, "dump-log", *args], capture_output=True, text=True, timeout=120
    )


def failed_clearly(res: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
    for needle in needles:
        assert needle in res.stderr, res.stderr


def brc(broker: int, version: int = 1, **tags: int) -> bytes:
    value = {"broker_id": broker, "broker_epoch": 5, "fenced": 0, "in_controlled_shutdown": 0,
             "log_dirs": (), **tags}  # fmt: skip
    return wire_encoder.metadata_value(17, METADATA_SCHEMAS[17], version, value)


NOOP = wire_encoder.metadata_value(20, METADATA_SCHEMAS[20], 0, {})


def segment(tmp_path: Path, *batches: bytes) -> Path:
    f = tmp_path / SEGMENT_NAME
    f.write_bytes(b"".join(batches))
    return f


def test_a_batch_cut_at_the_end_is_the_end_of_data(tmp_path: Path) -> None:
    data = (FIXTURE / "__cluster_metadata-0" / SEGMENT_NAME).read_bytes()
    f = segment(tmp_path, data[:-7])
    res = dump(str(f), "--json")
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.splitlines()) == 4928  # the last batch (one NoOp) is cut
    text = dump(str(f))
    assert text.returncode == 0 and "End of data at position" in text.stdout


def test_a_flipped_byte_is_a_crc32c_error_naming_file_and_offset(tmp_path: Path) -> None:
    good = wire_encoder.batch(0, 1, 1000, [(None, brc(1, fenced=-1))])
    second = bytearray(wire_encoder.batch(1, 1, 1000, [(None, brc(2, fenced=1)), (None, NOOP)]))
    second[70] ^= 0x10  # inside the records
    f = segment(tmp_path, good, bytes(second))
    res = dump(str(f), "--json")
    failed_clearly(res, f"{f} at offset 1 (file position {len(good)})", "CRC-32C mismatch")
    assert [json.loads(line)["offset"] for line in res.stdout.splitlines()] == [0]


def test_a_batch_of_an_unknown_magic_is_an_error(tmp_path: Path) -> None:
    bad = bytearray(wire_encoder.batch(7, 1, 1000, [(None, NOOP)]))
    bad[16] = 3
    f = segment(tmp_path, bytes(bad))
    failed_clearly(dump(str(f)), f"{f} at offset 7 (file position 0)", "unknown magic 3")


def test_format_flag_accepts_only_its_own_magic(tmp_path: Path) -> None:
    f = segment(tmp_path, wire_encoder.batch(0, 1, 1000, [(None, NOOP)]))
    failed_clearly(dump(str(f), "--format", "kraft"), "unknown magic 2 (--format kraft reads 1)")
    assert dump(str(f), "--format", "kafka").returncode == 0


def test_a_codec_that_is_not_installed_is_a_clear_error(tmp_path: Path) -> None:
    f = segment(tmp_path, wire_encoder.batch(0, 1, 1000, [(None, NOOP)] * 3, codec="zstd"))
    res = dump(str(f), "--json", prelude="sys.modules['cramjam'] = None  # as if not installed")
    failed_clearly(res, f"{f} at offset 0", "zstd-compressed", "cramjam package is not installed")
    assert dump(str(f), "--json").returncode == 0  # with it installed


def test_a_record_body_shorter_than_its_schema_is_an_error(tmp_path: Path) -> None:
    short = brc(3, fenced=1)[:-6]  # the batch's CRC is right, the record is not
    f = segment(tmp_path, wire_encoder.batch(0, 1, 1000, [(None, NOOP), (None, short)]))
    failed_clearly(
        dump(str(f), "--json"), f"cannot decode record at {f} at offset 1", "record body"
    )


def test_unknown_api_key_or_newer_version_stops_unless_skip_unknown(tmp_path: Path) -> None:
    unknown_key = b"\x01\x63\x00\x00"  # frame 1, api key 99, version 0, no tags
    newer = b"\x01\x05\x09\x00"  # PartitionChangeRecord v9
    f = segment(
        tmp_path,
        wire_encoder.batch(
            0, 1, 1000, [(None, NOOP), (None, unknown_key), (None, newer), (None, brc(4))]
        ),
    )
    failed_clearly(dump(str(f)), f"{f} at offset 1", "unknown metadata record api key 99")
    res = dump(str(f), "--json", "--skip-unknown")
    assert res.returncode == 0, res.stderr
    assert [json.loads(line)["offset"] for line in res.stdout.splitlines()] == [0, 3]
    assert "skipped 2 records" in res.stderr
    assert "api key 99: 1" in res.stderr and "PartitionChangeRecord v9: 1" in res.stderr


def test_other_files_of_the_folder_are_passed_over(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    shutil.copytree(FIXTURE / "__cluster_metadata-0", d)
    (d / "00000000000000000000.index").write_bytes(bytes(80))
    (d / "00000000000000000000.timeindex").write_bytes(bytes(120))
    res = dump(str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert (
        "Skipping 5 files that hold no record batches: 00000000000000000000.index, " in res.stdout
    )
    for name in ("00000000000000000000.timeindex", "quorum-state", "partition.metadata"):
        assert name in res.stdout.splitlines()[0]
    assert "Dumping" in res.stdout.splitlines()[1]
    alone = dump(str(d / "quorum-state"), "--json")
    assert alone.returncode == 0 and alone.stdout == ""


def test_the_log_is_only_read(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    shutil.copytree(FIXTURE / "__cluster_metadata-0", d)
    seg = d / SEGMENT_NAME
    before = (seg.read_bytes(), seg.stat().st_mtime_ns, sorted(os.listdir(d)))
    seg.chmod(0o444)
    d.chmod(0o555)
    try:
        res = dump(str(d), "--json")
    finally:
        d.chmod(0o755)
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.splitlines()) == 4929
    assert (seg.read_bytes(), seg.stat().st_mtime_ns, sorted(os.listdir(d))) == before


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_dump_like_uncompressed_ones(tmp_path: Path, codec: str) -> None:
    records = [(None, brc(5, fenced=1)), (None, NOOP), (None, brc(5, fenced=-1))]
    plain, squeezed = io.StringIO(), io.StringIO()
    dump_log.dump(segment(tmp_path, wire_encoder.batch(0, 2, 99, records)), True, 0, plain)
    packed = tmp_path / codec
    packed.mkdir()
    f = segment(packed, wire_encoder.batch(0, 2, 99, records, codec=codec))
    dump_log.dump(f, True, 0, squeezed)
    assert plain.getvalue() == squeezed.getvalue() and len(plain.getvalue().splitlines()) == 3
