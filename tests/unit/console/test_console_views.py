"""The console's pure views: trouble first and bounded (kraft.console.view), and the
feed of committed state changes (kraft.console.feed)."""

from __future__ import annotations

from kraft.console.feed import FIRST_WINDOW, changes_since, first_offset
from kraft.console.view import cluster_view, summarize
from metadata_log.batch import encode_batch
from metadata_log.image import MetadataImage
from metadata_log.records import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
)


def _image() -> MetadataImage:
    img = MetadataImage()
    recs = [RegisterBrokerRecord(b, f"inc-{b}", 10 + b, fenced=False) for b in (1, 2, 3, 4)]
    recs += [
        TopicRecord("t", "tid"),
        PartitionRecord("tid", 0, (1, 2), (1, 2), leader=1),
        PartitionRecord("tid", 1, (2, 3), (2,), leader=2),  # under-replicated
        PartitionRecord("tid", 2, (3, 4), (3,), leader=-1),  # offline
        PartitionRecord("tid", 3, (1, 2, 4), (1, 2, 4), adding_replicas=(4,), leader=1),
        FenceBrokerRecord(3, 13),
        BrokerRegistrationChangeRecord(4, 14, in_controlled_shutdown=1),
    ]
    for off, r in enumerate(recs):
        img.replay(r, off)
    return img


def test_the_view_lists_trouble_first_and_counts_everything() -> None:
    img = _image()
    view = cluster_view(img, summarize(img), {1: {("tid", 0)}}, lambda b: 100 * b, limit=10)
    states = [(b["broker_id"], b["state"]) for b in view["brokers"]["rows"]]
    assert states == [(3, "FENCED"), (4, "CONTROLLED_SHUTDOWN"), (1, "UNFENCED"), (2, "UNFENCED")]
    assert view["brokers"]["counts"] == {"UNFENCED": 2, "FENCED": 1, "CONTROLLED_SHUTDOWN": 1}
    assert view["brokers"]["rows"][2]["partitions_led"] == 1
    assert view["brokers"]["rows"][0]["heartbeat_age_ms"] == 300
    order = [(p["partition_id"], p["status"]) for p in view["partitions"]["rows"]]
    assert order == [(2, "offline"), (1, "under_replicated"), (3, "reassigning"), (0, "ok")]
    assert view["partitions"]["reassignments"] == 1
    assert view["topics"]["rows"][0]["offline"] == 1


def test_the_view_shows_at_most_limit_rows_but_counts_all() -> None:
    img = _image()
    view = cluster_view(img, summarize(img), {}, lambda b: None, limit=2)
    assert [b["broker_id"] for b in view["brokers"]["rows"]] == [3, 4]
    assert view["brokers"]["total"] == 4
    assert len(view["partitions"]["rows"]) == 2 and view["partitions"]["total"] == 4


def test_the_feed_keeps_state_changes_below_the_high_watermark_with_their_offsets() -> None:
    data = encode_batch(10, 1, 1_000, [NoOpRecord()], control=False) + encode_batch(
        11, 1, 2_000,
        [FenceBrokerRecord(3, 13), PartitionChangeRecord("tid", 0, isr=(1,), leader=1)],
    ) + encode_batch(13, 1, 3_000, [FenceBrokerRecord(4, 14)])  # fmt: skip
    out = changes_since(data, 10, 13, lambda tid: {"tid": "t"}.get(tid, tid))
    assert out["next_after"] == 12  # offset 13 is not committed yet
    assert [(c["offset"], c["kind"], c["append_time_ms"]) for c in out["changes"]] == [
        (11, "fence", 2_000),
        (12, "election", 2_000),
    ]
    assert out["changes"][1]["text"] == "t-0: leader -> 1, isr [1]"
    # the next poll starts after it, within the log
    assert first_offset(12, 14, 0) == 13
    assert first_offset(-1, 10_000, 0) == 10_000 - FIRST_WINDOW
    assert first_offset(-1, 100, 50) == 50


def test_a_move_is_reassigning_until_an_original_replica_leaves_the_isr() -> None:
    """Replicas still being added are not owed to the ISR (Kafka's under-replicated
    count): every move read as under_replicated, and no partition as reassigning."""
    img = MetadataImage()
    for off, r in enumerate(
        [RegisterBrokerRecord(b, f"inc-{b}", 10 + b, fenced=False) for b in (1, 2, 4)]
        + [
            TopicRecord("m", "mid"),
            PartitionRecord("mid", 0, (1, 2, 4), (1, 2), adding_replicas=(4,), leader=1),
            PartitionRecord("mid", 1, (1, 2, 4), (1,), adding_replicas=(4,), leader=1),
            PartitionRecord("mid", 2, (1, 2), (1, 2), removing_replicas=(2,), leader=1),
        ]
    ):
        img.replay(r, off)
    view = cluster_view(img, summarize(img), {}, lambda b: None, limit=10)
    status = {p["partition_id"]: p["status"] for p in view["partitions"]["rows"]}
    assert status == {0: "reassigning", 1: "under_replicated", 2: "reassigning"}
    assert view["partitions"]["counts"]["reassigning"] == 2


def test_topic_rows_are_read_live_between_two_summaries() -> None:
    """The summary (its counts and order) is at most 2 s old; a topic deleted since
    was still listed, with its Delete button, and a new one missing."""
    img = _image()
    summary = summarize(img)
    img.replay(TopicRecord("new", "nid"), 100)
    img.replay(PartitionRecord("nid", 0, (1,), (1,), leader=1), 101)
    img.replay(RemoveTopicRecord("tid"), 102)
    rows = cluster_view(img, summary, {}, lambda b: None, limit=10)["topics"]["rows"]
    assert [(t["name"], t["partitions"]) for t in rows] == [("new", 1)]


def test_the_feed_names_a_deleted_topic_it_read_the_creation_of() -> None:
    """The image of the poll no longer has a deleted topic: the feed takes its
    name from its TopicRecord when it read it, else from the caller (the route
    remembers the names its summaries saw), and only then shows the id."""
    data = encode_batch(
        20, 1, 1_000, [TopicRecord("payments", "pid"), RemoveTopicRecord("pid")]
    ) + encode_batch(22, 1, 2_000, [RemoveTopicRecord("old")])
    out = changes_since(data, 20, 23, lambda tid: {"old": "orders"}.get(tid, tid))
    assert [c["text"] for c in out["changes"]] == [
        "topic payments created",
        "topic payments deleted",
        "topic orders deleted",
    ]
    assert changes_since(data, 22, 23, lambda tid: tid)["changes"][0]["text"] == (
        "topic old deleted"
    )
    # a tab's polls read on from their last offset: the names read before hold
    seen: dict[str, str] = {}
    first = changes_since(data, 20, 21, lambda tid: tid, created=seen)
    assert [c["text"] for c in first["changes"]] == ["topic payments created"]
    later = changes_since(data, first["next_after"] + 1, 23, lambda tid: tid, created=seen)
    assert [c["text"] for c in later["changes"]] == ["topic payments deleted", "topic old deleted"]
