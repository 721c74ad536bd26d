"""With no log kept (`CountingSink`), the engine skips encoding a one-record
result whose size `_surely_fits` bounds below the batch limit: the bound must
never be below the record's encoded size, at any version of the record."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from metadata_log.records import (
    SUPPORTED_VERSION,
    FenceBrokerRecord,
    PartitionChangeRecord,
    encode_record,
)
from spark_replay.whatif.engine import _surely_fits

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
        assert _surely_fits(r, size + 1000)  # the bound is close: a few bytes per field
        assert not _surely_fits(r, size - 1), (v, size)


def test_only_partition_changes_are_bounded() -> None:
    assert not _surely_fits(FenceBrokerRecord(1, 2), 10**9)
    big = PartitionChangeRecord("t", 0, isr=tuple(range(100_000)))
    assert _surely_fits(big, 10**7) and not _surely_fits(big, len(encode_record(big)) - 1)
