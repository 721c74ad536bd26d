"""Crash acceptance: torn tails are cut, damage below the recovery point refuses to open.

- For every byte position inside the unflushed last batch of a segment, the file
  cut there reopens as the log ending at the batch before.
- A flipped byte anywhere in a batch below the recovery point (header fields
  included) makes opening fail with the file and the batch's offset in the error.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from metadata_log.batch import decode_batches, encode_batch
from metadata_log.errors import CorruptBatchError
from metadata_log.file_log import FileLog, segment_file_name
from metadata_log.records import (
    BrokerRegistrationChangeRecord,
    Endpoint,
    PartitionChangeRecord,
    RegisterBrokerRecord,
)

SEGMENT_BYTES = 400


def records(base: int, n: int) -> list:
    out = []
    for i in range(n):
        o = base + i
        if o % 3 == 0:
            out.append(RegisterBrokerRecord(o, f"inc-{o}", o, (Endpoint("PLAINTEXT", "h", 9092),)))
        elif o % 3 == 1:
            out.append(PartitionChangeRecord("topic", o, isr=(1, 2), leader=1))
        else:
            out.append(BrokerRegistrationChangeRecord(1, o, fenced=1))
    return out


def build(directory: Path) -> tuple[list[bytes], list[bytes], int]:
    """A flushed log over several segments plus one unflushed batch at its end.

    Returns (flushed batches, all batches, recovery point).
    """
    batches: list[bytes] = []
    with FileLog.open(directory, segment_bytes=SEGMENT_BYTES) as log:
        for i in range(12):
            b = encode_batch(
                log.end_offset, 1 + i // 5, 1_000 + i, records(log.end_offset, 1 + i % 3)
            )
            log.append(b)
            batches.append(b)
        log.checkpoint()  # flush, and the recovery-point checkpoint says so
        flushed = list(batches)
        rp = log.end_offset
        assert recovery_point_on_disk(directory) == rp
        last = encode_batch(log.end_offset, 3, 2_000, records(log.end_offset, 3))
        log.append(last)
        batches.append(last)
        assert len(log.segment_base_offsets()) >= 3
        log.close(flush=False)  # a crash: the last batch was never fsynced
    return flushed, batches, rp


def recovery_point_on_disk(directory: Path) -> int:
    return int((directory / "recovery-point-checkpoint").read_text().split()[-1])


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def test_every_cut_inside_the_unflushed_last_batch(tmp_path: Path) -> None:
    original = tmp_path / "original"
    flushed, batches, rp = build(original)
    last_seg = segments(original)[-1]
    data = last_seg.read_bytes()
    last = batches[-1]
    assert data.endswith(last)
    start = len(data) - len(last)
    expected = b"".join(flushed)
    for cut in range(start, len(data)):
        work = tmp_path / f"cut-{cut}"
        shutil.copytree(original, work)
        (work / last_seg.name).write_bytes(data[:cut])
        with FileLog.open(work, segment_bytes=SEGMENT_BYTES) as log:
            assert log.end_offset == rp, cut
            assert log.flushed_offset == rp
            out = []
            offset = log.start_offset
            while offset < log.end_offset:
                chunk = log.read(offset, 1 << 20)
                out.append(chunk)
                offset = decode_batches(chunk)[-1].next_offset
            assert b"".join(out) == expected
            # The log takes the next batch at the cut point.
            log.append(encode_batch(rp, 3, 3_000, records(rp, 1)))
        assert (work / last_seg.name).stat().st_size == start + len(
            encode_batch(rp, 3, 3_000, records(rp, 1))
        )
        shutil.rmtree(work)


def test_damage_after_the_recovery_point_is_a_torn_tail(tmp_path: Path) -> None:
    original = tmp_path / "original"
    _, batches, rp = build(original)
    last_seg = segments(original)[-1]
    data = last_seg.read_bytes()
    start = len(data) - len(batches[-1])
    for pos in range(start, len(data), 7):
        work = tmp_path / f"flip-{pos}"
        shutil.copytree(original, work)
        bad = bytearray(data)
        bad[pos] ^= 0x55
        (work / last_seg.name).write_bytes(bytes(bad))
        with FileLog.open(work, segment_bytes=SEGMENT_BYTES) as log:
            assert log.end_offset == rp
        shutil.rmtree(work)


def flushed_batch_positions(directory: Path) -> list[tuple[Path, int, int, int]]:
    """(segment, position, length, base offset) of every batch on disk."""
    out = []
    for seg in segments(directory):
        data = seg.read_bytes()
        pos = 0
        for b in decode_batches(data):
            length = len(b.encode())
            out.append((seg, pos, length, b.base_offset))
            pos += length
    return out


def test_every_flipped_byte_below_the_recovery_point_refuses_to_open(tmp_path: Path) -> None:
    original = tmp_path / "original"
    _, _, rp = build(original)
    work = tmp_path / "work"
    shutil.copytree(original, work)
    checked = 0
    for seg, pos, length, base in flushed_batch_positions(original):
        if base >= rp:
            continue  # the unflushed batch: a torn tail, tested above
        clean = seg.read_bytes()
        target = work / seg.name
        for i in range(length):
            bad = bytearray(clean)
            bad[pos + i] ^= 0xFF
            target.write_bytes(bytes(bad))
            with pytest.raises(CorruptBatchError) as info:
                FileLog.open(work, segment_bytes=SEGMENT_BYTES)
            err = info.value
            assert err.offset == base, (seg.name, pos + i)
            assert err.path == str(target)
            assert err.position == pos
            assert seg.name in str(err) and f"offset {base}" in str(err)
            checked += 1
        target.write_bytes(clean)
    assert checked > 500
    # Undamaged, it opens.
    with FileLog.open(work, segment_bytes=SEGMENT_BYTES) as log:
        assert log.end_offset > rp


def test_cut_below_the_recovery_point_refuses_to_open(tmp_path: Path) -> None:
    _, batches, rp = build(tmp_path)
    first = tmp_path / segment_file_name(0)
    data = first.read_bytes()
    first.write_bytes(data[: len(batches[0]) + 5])  # inside the second batch
    with pytest.raises(CorruptBatchError) as info:
        FileLog.open(tmp_path, segment_bytes=SEGMENT_BYTES)
    assert info.value.path == str(first)
    assert info.value.offset == decode_batches(batches[0])[0].next_offset


def test_every_cut_of_an_unflushed_batch_that_rolled_a_new_segment(tmp_path: Path) -> None:
    """The unflushed last batch opened a new segment: any prefix of it, or no file at all."""
    original = tmp_path / "original"
    with FileLog.open(original, segment_bytes=SEGMENT_BYTES) as log:
        for i in range(4):
            log.append(encode_batch(log.end_offset, 1, i, records(log.end_offset, 2)))
        log.checkpoint()
        rp, segs_before = log.end_offset, log.segment_base_offsets()
        assert len(encode_batch(rp, 2, 9, records(rp, 8))) < SEGMENT_BYTES
        flushed_epoch = 1
        while log.segment_base_offsets() == segs_before:  # fill until a batch rolls
            rp = log.end_offset
            big = encode_batch(rp, 2, 9, records(rp, 8))
            log.append(big)
            if log.segment_base_offsets() == segs_before:
                log.checkpoint()
                flushed_epoch = 2
        assert log.segment_base_offsets()[-1] == rp
        log.close(flush=False)
    new_seg = original / segment_file_name(rp)
    assert new_seg.read_bytes() == big
    for cut in [None, *range(len(big))]:
        work = tmp_path / f"cut-{cut}"
        shutil.copytree(original, work)
        if cut is None:
            (work / new_seg.name).unlink()  # its directory entry never made it to disk
        else:
            (work / new_seg.name).write_bytes(big[:cut])
        with FileLog.open(work, segment_bytes=SEGMENT_BYTES) as log:
            assert log.end_offset == rp, cut
            # The lost batch is gone from the epoch cache too.
            assert log.latest_epoch == flushed_epoch
            assert log.end_offset_for_epoch(3) == (flushed_epoch, rp)
        shutil.rmtree(work)
