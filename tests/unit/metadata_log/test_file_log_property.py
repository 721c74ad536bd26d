"""Property test: random append / truncate / flush / reopen / crash / trim / reset
sequences agree with an in-memory model of the log, leader-epoch cache included.

The model is deliberately naive (lists of batches and segments, epoch entries
recomputed from scratch) and independent of FileLog's code. A crash closes the
log without flushing, then cuts every segment file back to a random length
between what the model says is durable and its current length, drops segment
files created since the last sync point, garbles the advisory index files and
leaves stray temporary files behind; the model keeps exactly the batches that
survive whole.

Sync points (everything durable afterwards): flush, open, truncate_to,
delete_segments_below and reset (the last three are durable on return).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from metadata_log.batch import encode_batch, iter_headers
from metadata_log.errors import OffsetOutOfRangeError
from metadata_log.file_log import FileLog, segment_file_name
from metadata_log.records import NoOpRecord, PartitionChangeRecord

SEGMENT_BYTES = 300
INDEX_INTERVAL = 64
# Small, so that some flushes rewrite the recovery-point checkpoint and some do not.
RECOVERY_POINT_INTERVAL = 200


@dataclass
class MBatch:
    base: int
    count: int
    epoch: int
    data: bytes

    @property
    def end(self) -> int:
        return self.base + self.count


@dataclass
class MSegment:
    base: int
    batches: list[MBatch] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(len(b.data) for b in self.batches)

    def end(self) -> int:
        return self.batches[-1].end if self.batches else self.base


class LogModel:
    """What the log should hold."""

    def __init__(self) -> None:
        self.segments = [MSegment(0)]
        # Epochs at the log start that own no batch (a reset's, a trimmed log's).
        self.prefix: list[tuple[int, int]] = []
        self.durable: dict[int, int] = {0: 0}  # segment base -> durable bytes

    @property
    def batches(self) -> list[MBatch]:
        return [b for s in self.segments for b in s.batches]

    @property
    def start(self) -> int:
        return self.segments[0].base

    @property
    def end(self) -> int:
        return self.segments[-1].end()

    def entries(self) -> list[tuple[int, int]]:
        out = list(self.prefix)
        for b in self.batches:
            if not out or b.epoch > out[-1][0]:
                out.append((b.epoch, b.base))
        return out

    def latest_epoch(self) -> int:
        e = self.entries()
        return e[-1][0] if e else 0

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        e = self.entries()
        idx = [i for i, (ep, _) in enumerate(e) if ep <= epoch]
        if epoch < 0 or not idx:
            return (-1, -1)
        i = idx[-1]
        return (e[i][0], e[i + 1][1] if i + 1 < len(e) else self.end)

    def sync(self) -> None:
        self.durable = {s.base: s.size for s in self.segments}

    def append(self, b: MBatch) -> None:
        active = self.segments[-1]
        if active.size > 0 and active.size + len(b.data) > SEGMENT_BYTES:
            active = MSegment(b.base)
            self.segments.append(active)
        active.batches.append(b)

    def truncate(self, offset: int) -> None:
        if offset >= self.end or self.end == self.start:
            return
        if offset <= self.batches[0].end - 1 or offset <= self.start:
            # Emptied. A log starting after 0 continues from a snapshot and keeps
            # an epoch for its start: a reset's, else the one in effect there.
            first_epoch = self.batches[0].epoch
            kept = [p for p in self.prefix if p[0] < first_epoch]
            if not kept and self.start > 0:
                kept = [(first_epoch, self.start)]
            self.prefix = kept
            self.segments = [MSegment(self.start)]
        else:
            for s in self.segments:
                s.batches = [b for b in s.batches if b.end <= offset]
            # Segments left empty go, except the first.
            self.segments = [self.segments[0]] + [s for s in self.segments[1:] if s.batches]
        self.sync()

    def delete_below(self, offset: int) -> None:
        offset = min(offset, self.end)
        if offset <= self.start:
            return
        entries = self.entries()
        if offset == self.end and self.segments[-1].batches:
            self.segments.append(MSegment(self.end))
        while len(self.segments) > 1 and self.segments[0].end() <= offset:
            self.segments.pop(0)
        new_start = self.start
        # Kafka's truncate_from_start on the full entry list.
        before = [e for e in entries if e[1] < new_start]
        after = [e for e in entries if e[1] >= new_start]
        if before and not (after and after[0][1] == new_start):
            after.insert(0, (before[-1][0], new_start))
        batches = self.batches
        self.prefix = [
            e for e in after if e[1] == new_start and (not batches or e[0] < batches[0].epoch)
        ]
        self.sync()

    def reset(self, offset: int, epoch: int) -> None:
        self.segments = [MSegment(offset)]
        self.prefix = [(epoch, offset)]
        self.sync()

    def crash(self, cuts: dict[int, int]) -> None:
        """Keep the batches that survive whole in files cut to `cuts` (base -> length)."""
        kept: list[MSegment] = []
        for s in self.segments:
            if s.base not in cuts:
                break  # the file is gone, and so is everything after it
            seg = MSegment(s.base)
            pos = 0
            whole = True
            for b in s.batches:
                if pos + len(b.data) > cuts[s.base]:
                    whole = False
                    break
                seg.batches.append(b)
                pos += len(b.data)
            kept.append(seg)
            if not whole:
                break
        # Recovery drops empty segments that are not the last one.
        self.segments = [s for s in kept[:-1] if s.batches] + kept[-1:]
        self.sync()


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="logprop-"))
        self.model = LogModel()
        self.log = self.open()
        self.clock = 0

    def open(self) -> FileLog:
        return FileLog.open(
            self.dir,
            segment_bytes=SEGMENT_BYTES,
            index_interval_bytes=INDEX_INTERVAL,
            recovery_point_interval_bytes=RECOVERY_POINT_INTERVAL,
        )

    def teardown(self) -> None:
        self.log.close(flush=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ rules

    @rule(
        count=st.integers(1, 6),
        bump=st.sampled_from([0, 0, 0, 1, 2]),
        width=st.integers(0, 40),
    )
    def append(self, count: int, bump: int, width: int) -> None:
        base = self.model.end
        epoch = self.model.latest_epoch() + bump
        recs = [PartitionChangeRecord("x" * width, base + i, isr=(1, 2)) for i in range(count - 1)]
        recs.append(NoOpRecord())
        self.clock += 1
        data = encode_batch(base, epoch, self.clock, recs)
        header = self.log.append(data)
        assert header.base_offset == base and header.next_offset == base + count
        self.model.append(MBatch(base, count, epoch, data))

    @precondition(lambda self: self.model.latest_epoch() > 0)
    @rule()
    def append_with_a_lower_epoch_is_refused(self) -> None:
        data = encode_batch(self.model.end, self.model.latest_epoch() - 1, 0, [NoOpRecord()])
        try:
            self.log.append(data)
        except ValueError:
            return
        raise AssertionError("an append with a lower epoch was accepted")

    @rule()
    def flush(self) -> None:
        self.log.flush()
        assert self.log.flushed_offset == self.model.end
        self.model.sync()

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.model.start - 2, self.model.end + 2), "offset")
        self.model.truncate(offset)
        assert self.log.truncate_to(offset) == self.model.end

    @rule(data=st.data())
    def delete_segments_below(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.model.start, self.model.end + 1), "offset")
        self.model.delete_below(offset)
        assert self.log.delete_segments_below(offset) == self.model.start

    @rule(data=st.data())
    def reset(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(0, self.model.end + 30), "offset")
        epoch = data.draw(st.integers(0, self.model.latest_epoch() + 2), "epoch")
        self.model.reset(offset, epoch)
        self.log.reset(offset, epoch)

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.model.sync()
        self.log = self.open()

    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        durable = self.log.durable_sizes()
        # The log's own account of what is durable must match the model's.
        assert durable == {segment_file_name(b): n for b, n in self.model.durable.items()}
        self.log.close(flush=False)
        cuts: dict[int, int] = {}
        for s in self.model.segments:
            path = self.dir / segment_file_name(s.base)
            if s.base not in self.model.durable:
                path.unlink()
                continue
            size = path.stat().st_size
            assert size == s.size
            cut = data.draw(st.integers(self.model.durable[s.base], size), f"cut {s.base}")
            with open(path, "r+b") as f:
                f.truncate(cut)
            cuts[s.base] = cut
        for index in self.dir.glob("*.index"):
            if data.draw(st.booleans(), f"garble {index.name}"):
                index.write_bytes(b"\x00\x01garbage")
        if data.draw(st.booleans(), "stray files"):
            (self.dir / "leader-epoch-checkpoint.tmp").write_text("half")
            (self.dir / "00000000000000000007-0000000001.checkpoint.part").write_bytes(b"x")
        self.model.crash(cuts)
        self.log = self.open()

    # -------------------------------------------------------------- invariants

    @invariant()
    def recovery_point_is_a_lower_bound_of_the_durable_log(self) -> None:
        text = (self.dir / "recovery-point-checkpoint").read_text()
        rp = int(text.split()[-1])
        # Every offset below it is in a batch the model says is durable.
        durable_end = self.model.start
        for s in self.model.segments:
            pos = 0
            for b in s.batches:
                pos += len(b.data)
                if pos <= self.model.durable.get(s.base, -1):
                    durable_end = b.end
        assert rp <= max(durable_end, self.model.start), (rp, durable_end)

    @invariant()
    def agrees_with_the_model(self) -> None:
        m, log = self.model, self.log
        assert (log.start_offset, log.end_offset) == (m.start, m.end)
        assert log.segment_base_offsets() == [s.base for s in m.segments]
        assert log.epoch_entries() == m.entries()
        assert log.latest_epoch == m.latest_epoch()
        for epoch in range(-1, m.latest_epoch() + 2):
            assert log.end_offset_for_epoch(epoch) == m.end_offset_for(epoch), epoch
        # Every batch reads back from any offset inside it, and reads walk the log.
        for b in m.batches:
            assert log.read(b.base + b.count - 1, 1) == b.data
        assert log.read(m.end, 100) == b""
        try:
            log.read(m.end + 1, 100)
            raise AssertionError("read beyond the end succeeded")
        except OffsetOutOfRangeError:
            pass
        offset, out = m.start, []
        while offset < m.end:
            chunk = log.read(offset, 150)
            out.append(chunk)
            *_, (_, last) = iter_headers(chunk, "read", offset)
            offset = last.next_offset
        assert b"".join(out) == b"".join(b.data for b in m.batches)


LogMachine.TestCase.settings = settings(
    # LOG_PROP_EXAMPLES=1500 for a longer hunt (about a minute).
    max_examples=int(os.environ.get("LOG_PROP_EXAMPLES", "60")),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestLogProperties = LogMachine.TestCase
