"""With no log kept (`CountingSink`), the engine does not encode partition
changes whose bounded sizes (`_change_bound`) fit one batch: the bound must
never be below a record's encoded size, at any version of the record, and the
batches (and transactions) must be those the log path writes."""

from __future__ import annotations

from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from metadata_log.records import (
    SUPPORTED_VERSION,
    BeginTransactionRecord,
    PartitionChangeRecord,
    encode_record,
)
from metadata_log.replay import iter_file_batches, segment_files
from spark_replay.generator import METADATA_DIR, SegmentWriter, generate, scaled_config
from spark_replay.whatif.engine import CountingSink, _change_bound, forget_decisions, run_scenario
from spark_replay.whatif.facts import read_facts
from spark_replay.whatif.history_stream import HistoryStream
from spark_replay.whatif.replay import SEGMENT_BYTES
from spark_replay.whatif.scenario import build_scenarios

# the widest msgpack ints (9 bytes) drawn often: they are where the bound is tight
INT = st.integers(-(2**63), 2**63 - 1) | st.sampled_from((2**63 - 1, -(2**63), 2**32))
LIST = st.none() | st.lists(INT, max_size=40).map(tuple)
CHANGES = st.builds(
    PartitionChangeRecord,
    topic_id=st.text(max_size=60),  # any character: up to 4 bytes each in UTF-8
    partition_id=INT,
    isr=LIST,
    leader=INT,
    replicas=LIST,
    removing_replicas=LIST,
    adding_replicas=LIST,
    leader_recovery_state=INT,
    eligible_leader_replicas=LIST,
    last_known_elr=LIST,
)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(CHANGES)
@example(PartitionChangeRecord("\U0001f600" * 50, 2**63 - 1, isr=(2**63 - 1,) * 500))
def test_the_bound_is_never_below_the_encoded_size(r: PartitionChangeRecord) -> None:
    latest = SUPPORTED_VERSION[PartitionChangeRecord]
    for v in range(latest + 1):
        try:
            size = len(encode_record(r, v))
        except ValueError:  # a field this version lacks (the engine encodes those)
            assert v < latest
            continue
        assert size <= _change_bound(r) <= size + 1000, (v, size)  # close: bytes per field


def test_no_log_writes_the_batches_of_the_log_at_any_batch_limit(tmp_path: Path) -> None:
    """The engine's no-log path (sizes bounded, not encoded) splits results into
    the batches and transactions the log path writes: the same stats, records
    and tables, at a limit small enough to split fences into transactions."""
    log = tmp_path / "data"
    generate(log, scaled_config(3000, 5, crash_rate=0.03, shutdown_rate=0.03))
    facts = read_facts(log, 9000)
    begins = {}
    for limit in (700, 8 << 20):
        begins[limit] = 0
        for i, sets in enumerate(([], ["unclean.leader.election.enable=true"])):
            scenario = build_scenarios(sets)[-1]
            out = tmp_path / f"{limit}-{i}"
            sink = SegmentWriter(out / METADATA_DIR, segment_bytes=SEGMENT_BYTES)
            written = HistoryStream()
            forget_decisions()
            try:
                stats = run_scenario(facts, scenario, sink, limit, observer=written)
            finally:
                sink.close()
            counting, counted = CountingSink(), HistoryStream()
            forget_decisions()
            assert run_scenario(facts, scenario, counting, limit, observer=counted) == stats
            assert counting.next_offset == sink.next_offset
            for name, table in written.tables().items():
                assert counted.tables()[name].equals(table), (limit, sets, name)
            begins[limit] += sum(
                type(r) is BeginTransactionRecord
                for _, p in segment_files(out / METADATA_DIR)
                for b in iter_file_batches(p, allow_torn_tail=False)
                for r in b.records
            )
    # not vacuous: the small limit splits results into transactions of their own
    # (both copy the log's own transactions)
    assert begins[700] > begins[8 << 20], begins
