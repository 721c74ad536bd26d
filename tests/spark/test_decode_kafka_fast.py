"""The vectorised Kafka decode path equals the per-record one (spark_replay.decode_kafka).

Both read the same Kafka-format files of a seeded busy story (mostly NoOpRecords,
one per batch, as KRaft writes them) and must give the same rows, whatever the
pruning offset and chunk size; a file the fast path refuses (a flipped byte, a
torn tail) goes to the per-record path, which names the error as before.
No Spark here: these are the tasks' functions, run in this process.
"""

from __future__ import annotations

import dataclasses
import mmap
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from metadata_log.errors import MetadataLogError
from metadata_log.kafka.writer import write_kafka_log
from spark_replay import decode_kafka
from spark_replay.datasource import list_log_files
from spark_replay.decode import SOURCE_SEGMENT, LogFile, read_file
from spark_replay.generator import GeneratorConfig, generate

BUSY = GeneratorConfig(
    records=4_000,
    seed=5,
    step_ms=(400, 600),
    isr_shrink_rate=0.05,
    shutdown_rate=0.003,
    crash_rate=0.002,
    failover_rate=0.002,
    segment_bytes=48 * 1024,
    max_batch_bytes=600,
)


@pytest.fixture(scope="module")
def kafka_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("busy")
    generate(base / "native", BUSY)
    write_kafka_log(base / "native", base / "kafka")
    return base / "kafka"


def _rows(batches: Any) -> list[dict[str, Any]]:
    table = pa.Table.from_batches(list(batches), schema=decode_kafka.ARROW_SCHEMA)
    return sorted(table.to_pylist(), key=lambda r: (r["offset"], r["type"]))


def _both(f: LogFile, chunk: int = 65_536) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return (
        _rows(decode_kafka.read_kafka_file(f, chunk)),
        _rows(decode_kafka._per_record(f, chunk)),
    )


def test_fast_path_equals_per_record_on_every_file(kafka_log: Path) -> None:
    files = [f for f in list_log_files(kafka_log) if f.source == SOURCE_SEGMENT]
    assert len(files) > 2
    noops = 0
    for f in files:
        with open(f.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
            plan = decode_kafka._plan(f, m)
            assert plan is not None, f.path  # the vectorised path is the one taken
            noops += int(plan.noop.sum())
            del plan
        fast, slow = _both(f, chunk=257)
        assert fast == slow, f.path
        assert fast == _rows(read_file(f)), f.path  # what a Spark task reads
    # mostly NoOps, each recognised as one
    assert noops > BUSY.records // 2


def test_partition_records_take_the_vectorised_columns(
    kafka_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[tuple[str, int]] = []
    real = decode_kafka._hot_batch

    def spy(spec: Any, at: Any, typed: Any, f: Any) -> Any:
        built.append((spec.name, len(at)))
        return real(spec, at, typed, f)

    monkeypatch.setattr(decode_kafka, "_hot_batch", spy)
    for f in list_log_files(kafka_log):
        fast = _rows(decode_kafka.read_kafka_file(f, 65_536))
        assert fast == _rows(decode_kafka._per_record(f, 65_536)), f.path
    names = {name for name, _ in built}
    assert names == {"PartitionRecord", "PartitionChangeRecord"}, built


def test_every_data_batch_of_a_kafka_written_log_is_framed_by_numpy(
    kafka_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer's batches (one record or several, uncompressed) all take add_framed:
    nothing is left to the per-record reader but the control batches."""
    framed, several = [], []
    real = decode_kafka._HotRows.add_framed

    def spy(self: Any, out: Any, data: Any, u8: Any, plan: Any, idx: Any, *rest: Any) -> Any:
        ok = real(self, out, data, u8, plan, idx, *rest)
        framed.append(bool(ok.all()))
        several.append(int((plan.headers["record_count"][idx] > 1).sum()))
        return ok

    monkeypatch.setattr(decode_kafka._HotRows, "add_framed", spy)
    for f in list_log_files(kafka_log):
        if f.source == SOURCE_SEGMENT:
            assert _rows(decode_kafka.read_kafka_file(f, 65_536)) == _rows(
                decode_kafka._per_record(f, 65_536)
            )
    assert framed and all(framed)
    assert sum(several) > 10  # batches of several records among them


@pytest.mark.parametrize("fraction", [0.0, 0.37, 0.81])
def test_pruning_equals_per_record(kafka_log: Path, fraction: float) -> None:
    files = [f for f in list_log_files(kafka_log) if f.source == SOURCE_SEGMENT]
    upto = int(BUSY.records * fraction)
    for f in files:
        g = dataclasses.replace(f, upto_offset=upto)
        fast, slow = _both(g)
        assert fast == slow, (f.path, upto)
        assert all(r["offset"] <= upto for r in fast)


def test_flipped_byte_is_the_per_record_error(kafka_log: Path, tmp_path: Path) -> None:
    f = next(f for f in list_log_files(kafka_log) if f.source == SOURCE_SEGMENT)
    copy = tmp_path / Path(f.path).name
    shutil.copyfile(f.path, copy)
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0x40
    copy.write_bytes(bytes(data))
    g = dataclasses.replace(f, path=str(copy), next_base_offset=None)
    with pytest.raises(MetadataLogError, match="CRC-32C|crc"):
        list(decode_kafka.read_kafka_file(g, 1000))


def test_torn_tail_of_the_last_segment_reads_as_before(kafka_log: Path, tmp_path: Path) -> None:
    f = [f for f in list_log_files(kafka_log) if f.source == SOURCE_SEGMENT][-1]
    copy = tmp_path / Path(f.path).name
    data = Path(f.path).read_bytes()
    copy.write_bytes(data[: len(data) - 5])
    g = dataclasses.replace(f, path=str(copy))
    fast, slow = _both(g)
    assert fast == slow and fast


# ----------------------------------------------------------------------------- native

TOPIC = "AAAAAAAAAAAAAAAAAAAAAQ"


def _native_segment(path: Path) -> LogFile:
    """PartitionRecords and PartitionChangeRecords at both versions (v0 has no ELR
    fields: a record keeps the version it was written at), NoOps between."""
    from metadata_log.batch import encode_payload
    from metadata_log.records import (
        NoOpRecord,
        PartitionChangeRecord,
        PartitionRecord,
        TopicRecord,
        encode_record,
    )

    recs: list[tuple[Any, int | None]] = [(TopicRecord("t", TOPIC), None)]
    for p in range(40):
        v = p % 2
        elr = (3,) if v else ()
        recs.append(
            (
                PartitionRecord(
                    topic_id=TOPIC,
                    partition_id=p,
                    replicas=(1, 2, 3),
                    isr=(1, 2, 3),
                    leader=1 + p % 3,
                    eligible_leader_replicas=elr,
                ),
                v,
            )
        )
    for k in range(200):
        v = k % 2
        recs.append(
            (
                PartitionChangeRecord(
                    topic_id=TOPIC,
                    partition_id=k % 40,
                    isr=(1, 2) if k % 3 else None,
                    leader=2 if k % 5 == 0 else -2,
                    eligible_leader_replicas=(3,) if v and k % 4 == 1 else None,
                ),
                v,
            )
        )
        recs.append((NoOpRecord(), None))
    out, off = [], 0
    for i in range(0, len(recs), 3):  # batches of up to 3 records
        chunk = recs[i : i + 3]
        payload = b"".join(encode_record(r, v) for r, v in chunk)
        out.append(encode_payload(off, 1, 1_700_000_000_000 + off, payload, len(chunk)))
        off += len(chunk)
    path.write_bytes(b"".join(out))
    return LogFile(path=str(path), source=SOURCE_SEGMENT, base_offset=0, last_segment=True)


def test_native_fast_path_equals_per_record_at_every_record_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_replay import decode

    f = _native_segment(tmp_path / "00000000000000000000.log")
    hot = []
    real_hot_batch = decode._Reader._hot_batch

    def spy(self: Any, spec: Any, *args: Any) -> Any:
        hot.append((spec.name, spec.version))
        return real_hot_batch(self, spec, *args)

    monkeypatch.setattr(decode._Reader, "_hot_batch", spy)
    fast = _rows(read_file(f, chunk_records=100))
    # every hot type and version took the vectorised path
    assert set(hot) == {
        (n, v) for n in ("PartitionRecord", "PartitionChangeRecord") for v in (0, 1)
    }

    def refuse(self: Any, *args: Any) -> Any:
        raise decode._FastDecodeRefused

    monkeypatch.setattr(decode._Reader, "_fast_chunk", refuse)
    slow = _rows(read_file(f, chunk_records=100))
    assert fast == slow
    assert len(fast) == 441


# ----------------------------------------------------------------------------- framing


def _record(ts_delta: int, delta: int, key: bytes | None, value: bytes, headers: int) -> bytes:
    """One record as Kafka frames it (the tests' encoder: tests/unit/.../wire_encoder)."""
    from tests.unit.metadata_log.kafka.wire_encoder import Sink

    rec = Sink()
    rec.raw(b"\x00")  # attributes
    rec.signed_varint(ts_delta)
    rec.signed_varint(delta)
    rec.signed_varint(-1 if key is None else len(key))
    rec.raw(key or b"")
    rec.signed_varint(len(value))
    rec.raw(value)
    rec.signed_varint(headers)
    for _ in range(headers):
        rec.signed_varint(1)
        rec.raw(b"h")
        rec.signed_varint(-1)
    out = Sink()
    out.signed_varint(len(rec.buf))
    out.raw(bytes(rec.buf))
    return bytes(out.buf)


def _batch(
    base: int, records: list[bytes], ts: int, max_ts: int, attributes: int, codec: str
) -> bytes:
    import struct

    import crc32c

    from tests.unit.metadata_log.kafka.wire_encoder import CODEC_IDS, compress

    payload = compress(codec, b"".join(records))
    attributes |= CODEC_IDS[codec]
    after_crc = struct.pack(">hiqqqhii", attributes, len(records) - 1, ts, max_ts, -1, -1, -1,
                            len(records)) + payload  # fmt: skip
    head = struct.pack(">qiib", base, 9 + len(after_crc), 7, 2)
    return head + struct.pack(">I", crc32c.crc32c(after_crc)) + after_crc


def _values(with_junk: bool = False) -> Any:
    """Record values: partition records of every version, broker changes, topics."""
    from hypothesis import strategies as st

    from metadata_log.kafka.schemas import METADATA_SCHEMAS
    from tests.unit.metadata_log.kafka import wire_encoder
    from tests.unit.metadata_log.kafka.strategies import struct_values

    options = []
    for key in (3, 5, 17, 2):  # PartitionRecord, PartitionChangeRecord, BRC, TopicRecord
        schema = METADATA_SCHEMAS[key]
        for v in range(schema["versions"][0], schema["versions"][1] + 1):
            options.append(
                struct_values(schema["fields"], v).map(
                    lambda value, k=key, s=schema, v=v: wire_encoder.metadata_value(k, s, v, value)
                )
            )
    # now and then a PartitionChangeRecord value whose body is anything
    junk = st.binary(max_size=30).map(lambda b: bytes([1, 5, 1]) + b)
    return st.one_of(*options, junk) if with_junk else st.one_of(options)


def _framing_cases() -> Any:
    from hypothesis import strategies as st

    # a value is drawn once per batch and repeated in some records (values repeat in
    # a real log: the decoded-once cache); ts deltas of 1 to 3 varint bytes and more
    record = st.tuples(
        st.one_of(st.just(0), st.integers(0, 70), st.integers(0, 2**22), st.integers(0, 2**40)),
        st.one_of(st.none(), st.none(), st.none(), st.binary(max_size=3)),  # key
        st.one_of(st.just(0), st.just(0), st.just(0), st.just(1)),  # headers
        st.booleans(),  # the batch's shared value, or its own
    )
    batch = st.tuples(
        st.lists(st.tuples(record, _values(with_junk=True)), min_size=1, max_size=5),
        _values(),
        st.sampled_from([0, 0, 0, 0x08]),  # create time, or LOG_APPEND_TIME
        st.sampled_from(["none", "none", "none", "gzip"]),
        st.integers(0, 2**41),
    )
    return st.lists(batch, min_size=1, max_size=8)


def _explicit_framing_cases() -> list[list[Any]]:
    """Cases of `_framing_cases`' shape that take each way for sure: batches the
    numpy framing reads (one record, several, a shared value met twice, a value
    of 64 bytes or more, LOG_APPEND_TIME) and batches it leaves to the
    reference (a key, headers, a timestamp delta of more than 3 varint bytes;
    gzip goes to neither). Hypothesis draws the other cases with the constants
    of every module loaded (6.13x and later): a suite that imports more modules
    draws other cases, so the count of each way must not rest on the draw."""
    from metadata_log.kafka.schemas import METADATA_SCHEMAS
    from tests.unit.metadata_log.kafka import wire_encoder

    def topic(name: str) -> bytes:
        value = {"name": name, "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ"}
        return wire_encoder.metadata_value(2, METADATA_SCHEMAS[2], 0, value)

    small, big = topic("t"), topic("t" * 70)
    one = [((1, None, 0, True), small)]
    several = [((i, None, 0, i % 2 == 0), big) for i in range(3)]
    keyed = [((1, b"k", 0, True), small)]
    headers = [((1, None, 1, True), small)]
    long_delta = [((2**40, None, 0, True), small)]
    return [
        [(one, small, 0, "none", 1000)] * 8,
        [(several, small, 0, "none", 7)] * 8,
        [(one, big, 0x08, "none", 2**41)] * 8,
        [(one, big, 0, "none", 3), (several, small, 0, "none", 5)] * 4,
        [(keyed, small, 0, "none", 0)] * 8,
        [(headers, small, 0, "none", 0), (long_delta, small, 0, "none", 0)] * 4,
        [(one, small, 0, "gzip", 0), (keyed, small, 0, "gzip", 0)] * 4,
    ]


def test_framed_batches_equal_the_per_record_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every shape the numpy framing (add_framed) reads or refuses, against the
    per-record reference, row for row: one and several records per batch, long
    timestamp deltas, keys, headers, LOG_APPEND_TIME, compressed batches, a value
    of 64 bytes or more, values met twice."""
    import tempfile

    from hypothesis import HealthCheck, example, given, settings

    taken = {True: 0, False: 0}
    real = decode_kafka._HotRows.add_framed

    def spy(self: Any, *args: Any) -> Any:
        ok = real(self, *args)
        taken[True] += int(ok.sum())
        taken[False] += int((~ok).sum())
        return ok

    monkeypatch.setattr(decode_kafka._HotRows, "add_framed", spy)

    @settings(max_examples=50, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
    @given(_framing_cases())
    def check(batches: list[Any]) -> None:
        data, base = b"", 0
        for records, shared, attributes, codec, ts in batches:
            recs = [
                _record(ts_d, i, key, shared if same else own, headers)
                for i, ((ts_d, key, headers, same), own) in enumerate(records)
            ]
            max_ts = ts + max(r[0][0] for r in records) + 5
            data += _batch(base, recs, ts, max_ts, attributes, codec)
            base += len(recs)
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "00000000000000000000.log"
            path.write_bytes(data)
            f = LogFile(path=str(path), source=SOURCE_SEGMENT, base_offset=0, last_segment=True)
            for chunk in (3, 65_536):
                results = []
                for read in (decode_kafka.read_kafka_file, decode_kafka._per_record):
                    try:
                        results.append(_rows(read(f, chunk)))
                    except MetadataLogError as e:  # a junk value: the same error
                        results.append(str(e))
                assert results[0] == results[1]
                assert isinstance(results[0], str) or len(results[0]) == base

    for case in _explicit_framing_cases():
        check = example(case)(check)
    check()
    # both ways were taken: batches framed by numpy, and batches left to the reference
    assert taken[True] > 50 and taken[False] > 20, taken


def test_a_value_the_tables_do_not_know_is_the_per_record_error(tmp_path: Path) -> None:
    from metadata_log.kafka.schemas import METADATA_SCHEMAS
    from tests.unit.metadata_log.kafka import wire_encoder

    pcr = METADATA_SCHEMAS[5]
    good = wire_encoder.metadata_value(5, pcr, 0, {f["name"]: f["default"] for f in pcr["fields"]})
    newer = bytearray(good)
    newer[2] = 9  # PartitionChangeRecord v9
    recs = [_record(0, 0, None, v, 0) for v in (good, bytes(newer))]
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(_batch(0, recs[:1], 1, 1, 0, "none") + _batch(1, [recs[1]], 2, 2, 0, "none"))
    f = LogFile(path=str(path), source=SOURCE_SEGMENT, base_offset=0, last_segment=True)
    with pytest.raises(
        MetadataLogError, match=r"00000000000000000000\.log.*offset 1.*newer"
    ) as fast:
        list(decode_kafka.read_kafka_file(f, 100))
    with pytest.raises(MetadataLogError) as slow:
        list(decode_kafka._per_record(f, 100))
    assert str(fast.value) == str(slow.value)


REAL = Path(__file__).resolve().parents[1] / "fixtures" / "kafka"


@pytest.mark.parametrize("log", ["ldi-poc", "kafka-4x-rig", "kafka-3x-datadir"])
def test_logs_written_by_a_real_kafka_read_the_same_both_ways(log: str) -> None:
    files = list_log_files(REAL / log)
    assert files
    for f in files:
        fast, slow = _both(f, 1000)
        assert fast == slow and fast, f.path


def test_records_that_do_not_add_up_are_the_per_record_error() -> None:
    """A batch whose CRC holds but whose records section is anything (lengths past
    the batch, stray bytes): the fast path gives the reference's rows or its error."""
    import tempfile

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from metadata_log.kafka.schemas import METADATA_SCHEMAS
    from tests.unit.metadata_log.kafka import wire_encoder

    pcr = METADATA_SCHEMAS[5]
    good = _record(0, 0, None, wire_encoder.metadata_value(5, pcr, 0, {
        f["name"]: f["default"] for f in pcr["fields"]}), 0)  # fmt: skip

    @settings(max_examples=40, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
    @given(st.binary(max_size=40), st.integers(1, 4), st.booleans())
    def check(junk: bytes, count: int, lead: bool) -> None:
        records = [good, junk] if lead else [junk]
        body = _batch(0, records, 5, 5, 0, "none")
        # the header's record count, as drawn (the records may say otherwise)
        body = body[:57] + count.to_bytes(4, "big") + body[61:]
        import struct

        import crc32c

        body = body[:17] + struct.pack(">I", crc32c.crc32c(body[21:])) + body[21:]
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "00000000000000000000.log"
            path.write_bytes(body)
            f = LogFile(path=str(path), source=SOURCE_SEGMENT, base_offset=0, last_segment=True)
            results = []
            for read in (decode_kafka.read_kafka_file, decode_kafka._per_record):
                try:
                    results.append(_rows(read(f, 100)))
                except MetadataLogError as e:
                    results.append(str(e))
            assert results[0] == results[1]

    check()


@pytest.mark.parametrize("fmt", ["kafka", "kraft"])
def test_a_torn_tail_is_told_to_the_driver(fmt: str, kafka_log: Path, tmp_path: Path) -> None:
    """The newest segment's incomplete last batch is the end of the data, and its
    file's stats say where and how many bytes were left unread: the history, the
    summary and stderr said nothing of it."""
    from spark_replay.decode import file_stats
    from spark_replay.history import info_from_stats, torn_tail_text
    from spark_replay.report import _log_warnings

    before = []  # the stats of the segments before the torn one
    if fmt == "kafka":
        *older, f = [f for f in list_log_files(kafka_log) if f.source == SOURCE_SEGMENT]
        for g in older:
            before.append(file_stats(g))
            list(read_file(g, stats=before[-1]))
        copy = tmp_path / Path(f.path).name
        shutil.copyfile(f.path, copy)
        f = dataclasses.replace(f, path=str(copy))
    else:
        f = _native_segment(tmp_path / "00000000000000000000.log")
    path = Path(f.path)
    whole = _rows(read_file(f))
    stats = file_stats(f)
    list(read_file(f, stats=stats))
    assert stats.torn_tail is None
    data = path.read_bytes()
    path.write_bytes(data[:-5])
    stats = file_stats(f)
    torn = _rows(read_file(f, stats=stats))
    assert 0 < len(torn) < len(whole) and torn == whole[: len(torn)]
    assert stats.torn_tail is not None
    position, left = stats.torn_tail
    assert left == len(data) - 5 - position and left > 0
    info = info_from_stats([*before, stats])
    assert info.torn_tail == {"file": str(path), "position": position, "bytes": left}
    assert info.to_dict()["torn_tail"] == info.torn_tail
    text = torn_tail_text(info.torn_tail)
    assert f"{path} ends in an incomplete batch at file position {position}" in text
    assert "Warning:" in _log_warnings({"torn_tail": info.torn_tail})
    assert _log_warnings({}) == ""


def test_a_leader_epoch_that_goes_back_is_told_to_the_driver(
    kafka_log: Path, tmp_path: Path
) -> None:
    """Kafka's batch CRC does not cover the partition leader epoch (bytes 12-15): a
    damaged one decodes, and showed nowhere. Each segment's stats keep its first and
    highest epoch and its first step back; the driver finds a step back inside a
    segment and across two, and says so (stderr, summary, report)."""
    from kraft.tools.dump_log import iter_file
    from spark_replay.decode import file_stats
    from spark_replay.history import epoch_back_text, info_from_stats
    from spark_replay.report import _log_warnings

    def stats_of(files: list[Any]) -> list[Any]:
        out = []
        for g in files:
            out.append(file_stats(g))
            list(read_file(g, stats=out[-1]))
        return out

    segs = [f for f in list_log_files(kafka_log) if f.source == SOURCE_SEGMENT]
    assert len(segs) >= 2
    assert info_from_stats(stats_of(segs)).epoch_back is None

    def damaged(which: int, pick: Any) -> tuple[list[Any], Any]:
        copies = []
        for f in segs:
            copy = tmp_path / f"{which}" / Path(f.path).name
            copy.parent.mkdir(exist_ok=True)
            shutil.copyfile(f.path, copy)
            copies.append(dataclasses.replace(f, path=str(copy)))
        path = Path(copies[which].path)
        batches = [b for b in iter_file(path) if not isinstance(b, Exception)]
        b = pick(batches)
        data = bytearray(path.read_bytes())
        data[b.position + 12 : b.position + 16] = (0).to_bytes(4, "big")
        path.write_bytes(bytes(data))
        return copies, b

    # inside a segment: a batch in the middle of the last one
    copies, b = damaged(len(segs) - 1, lambda bs: bs[len(bs) // 2])
    top = max(x.epoch for x in iter_file(Path(segs[-1].path)) if x.base_offset < b.base_offset)
    info = info_from_stats(stats_of(copies))
    assert info.epoch_back == {
        "file": copies[-1].path,
        "offset": b.base_offset,
        "epoch": 0,
        "before": top,
    }
    assert info.to_dict()["epoch_back"] == info.epoch_back
    text = epoch_back_text(info.epoch_back)
    assert text.startswith(f"{copies[-1].path}: the record at offset {b.base_offset} has leader ")
    assert "Warning:" in _log_warnings({"epoch_back": info.epoch_back})
    # across segments: the first batch of the second segment
    copies, b = damaged(1, lambda bs: bs[0])
    info = info_from_stats(stats_of(copies))
    assert info.epoch_back is not None
    assert (info.epoch_back["file"], info.epoch_back["offset"]) == (copies[1].path, b.base_offset)
