"""Large results become one atomic metadata transaction across batches."""

from __future__ import annotations

from kraft.controller.batching import to_batches
from metadata_log.batch import decode_batches, encode_payload
from metadata_log.image import MetadataImage
from metadata_log.records import (
    BeginTransactionRecord,
    EndTransactionRecord,
    PartitionRecord,
    TopicRecord,
)


def test_small_result_is_one_batch() -> None:
    recs = [TopicRecord("t", "T"), PartitionRecord("T", 0, (1,), (1,), leader=1)]
    plan = to_batches(recs)
    assert len(plan.batches) == 1 and plan.batches[0].record_count == 2 and plan.records == recs


def test_large_result_is_a_transaction_applied_at_its_end() -> None:
    recs = [TopicRecord("t", "T")] + [
        PartitionRecord("T", i, (1, 2, 3), (1, 2, 3), leader=1) for i in range(2000)
    ]
    plan = to_batches(recs, max_batch_bytes=4096, name="create t")
    batches = plan.batches
    assert len(batches) > 10
    raw = b""
    offset = 0
    for b in batches:
        raw += encode_payload(offset, 1, 0, b.payload, b.record_count)
        offset += b.record_count
    decoded = [r for b in decode_batches(raw) for r in b.records]
    assert (
        decoded[0] == BeginTransactionRecord("create t") and decoded[-1] == EndTransactionRecord()
    )
    assert decoded[1:-1] == recs and decoded == plan.records
    image = MetadataImage()
    seen_partial = False
    for off, r in enumerate(decoded):
        image.replay(r, off)
        if off < len(decoded) - 1:
            seen_partial |= image.topic_by_name("t") is not None
    assert not seen_partial  # nothing visible before the end record
    assert len(image.topic_by_name("t").partitions) == 2000


def test_record_encoder_writes_what_encode_record_writes() -> None:
    """The encoder's per-class fast path equals encode_record for every record class,
    at every metadata.version this code writes."""
    import dataclasses

    from kraft.controller.batching import RecordEncoder
    from metadata_log.records import (
        ALL_RECORD_TYPES,
        LATEST_METADATA_VERSION,
        FenceBrokerRecord,
        PartitionChangeRecord,
        PartitionRecord,
        RemoveTopicRecord,
        TopicRecord,
        UnfenceBrokerRecord,
        UnsupportedMetadataVersionError,
        encode_record,
        record_version,
    )

    samples = [
        PartitionChangeRecord("t", 3, (1, 2), 2, None, (), (3,), 1),
        PartitionChangeRecord("t", 4),
        PartitionRecord("t", 0, (1, 2), (1,), leader=1),
        FenceBrokerRecord(1, 2),
        UnfenceBrokerRecord(1, 2),
        TopicRecord("n", "id"),
        RemoveTopicRecord("id"),
    ]
    for cls in ALL_RECORD_TYPES:
        fs = dataclasses.fields(cls)
        if all(f.default is not dataclasses.MISSING for f in fs):
            samples.append(cls())
    assert len(samples) > 4
    for mv in (None, *range(1, LATEST_METADATA_VERSION + 1)):
        enc = RecordEncoder(mv)
        for rec in samples:
            try:
                want = encode_record(rec, None if mv is None else record_version(type(rec), mv))
            except (UnsupportedMetadataVersionError, ValueError):
                continue
            assert enc.encode([rec]) == [want], (mv, rec)
