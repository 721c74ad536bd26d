"""PartitionChangeRecord values decoded many at once with numpy.

The records a busy Kafka log holds most of, besides NoOps, are
PartitionChangeRecords: a partition id, a topic id and a few tagged fields (isr,
leader, replicas, reassignments, leader recovery state, directories, ELR). Each
distinct value costs about 1.5 us through the generated per-value decoder
(record_serde.native_values); here the values met for the first time in a chunk
are read together: the fixed fields by one gather, then the tagged section in
lock-step (the k-th tag of every value at once), each array field's elements by
one gather and one big-endian view.

It is a second implementation of `record_serde.native_values` for
PartitionChangeRecord v0-2, tested equal to it (hypothesis, every version). It
only takes the common shapes: one-byte tag counts, tags and sizes, no tag twice,
no tag the version does not know. Any other value comes out None, and the caller
asks native_values (and, past it, decode_value, which names any problem).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from metadata_log.kafka.message import UUID_CACHE_SIZE, UUID_TEXT_CACHE, uuid_text

PARTITION_CHANGE = 5  # the api key
# Tags by field (Kafka's PartitionChangeRecord.json); the versions that know them.
_ISR, _LEADER, _REPLICAS, _REMOVING, _ADDING, _LRS, _ELR, _LKELR, _DIRS = 0, 1, 2, 3, 4, 5, 6, 7, 8
_KNOWN = {0: 0b000111111, 1: 0b100111111, 2: 0b111111111}  # version -> tags it knows
_ARRAYS = (_ISR, _REPLICAS, _REMOVING, _ADDING, _ELR, _LKELR)  # of int32, nullable
_MAX_TAGS = 9


def _uuid_texts(raws: list[bytes]) -> list[str]:
    get = UUID_TEXT_CACHE.get
    out = []
    for raw in raws:
        text = get(raw)
        if text is None:
            if len(UUID_TEXT_CACHE) >= UUID_CACHE_SIZE:
                UUID_TEXT_CACHE.clear()
            text = UUID_TEXT_CACHE[raw] = uuid_text(raw)
        out.append(text)
    return out


def partition_changes(values: list[bytes]) -> list[tuple[Any, ...] | None]:
    """The native fields (NATIVE_FIELDS' tuple: topic id, partition id, isr, leader,
    replicas, removing, adding, leader recovery state, ELR, last known ELR) of each
    PartitionChangeRecord value, or None where the value is not one in a common
    shape (the caller decodes it one by one)."""
    n = len(values)
    out: list[tuple[Any, ...] | None] = [None] * n
    if not n:
        return out
    lengths = np.fromiter(map(len, values), np.int64, n)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    buf = np.frombuffer(b"".join(values) + bytes(8), np.uint8)  # 8: reads past the end
    last = len(buf) - 1

    def at(pos: np.ndarray) -> np.ndarray:
        return buf[np.minimum(pos, last)].astype(np.int64)

    version = at(starts + 2)
    ok = (lengths >= 24) & (at(starts) == 1) & (at(starts + 1) == PARTITION_CHANGE)
    ok &= (version <= 2) & (at(starts + 23) < 0x80)
    known = np.array([_KNOWN[0], _KNOWN[1], _KNOWN[2], 0], np.int64)[np.minimum(version, 3)]
    count = at(starts + 23)
    ok &= count <= _MAX_TAGS
    # the tagged section, the k-th tag of every value at once
    pos = starts + 24
    seen = np.zeros(n, np.int64)
    spans = np.full((n, _MAX_TAGS), -1, np.int64)  # value start of each tag, by tag
    sizes = np.zeros((n, _MAX_TAGS), np.int64)
    rows = np.arange(n)
    for k in range(int(count[ok].max(initial=0))):
        active = ok & (k < count)  # the values reading their k-th tag
        tag, size = at(pos), at(pos + 1)
        bit = np.left_shift(1, np.minimum(tag, _MAX_TAGS - 1))
        valid = (tag < _MAX_TAGS) & (size < 0x80) & ((seen & bit) == 0) & ((known & bit) != 0)
        ok &= ~active | valid  # a tag twice, or one the version does not know
        live = active & valid
        r, t = rows[live], tag[live]
        spans[r, t] = pos[live] + 2
        sizes[r, t] = size[live]
        seen |= np.where(live, bit, 0)
        pos = np.where(live, pos + 2 + size, pos)
    ok &= pos == ends
    # fixed-size tagged fields have their exact sizes
    has_leader, has_lrs = spans[:, _LEADER] >= 0, spans[:, _LRS] >= 0
    ok &= ~has_leader | (sizes[:, _LEADER] == 4)
    ok &= ~has_lrs | (sizes[:, _LRS] == 1)
    # arrays: a one-byte count (N + 1, 0 = null), then N int32 filling the field
    counts: dict[int, np.ndarray] = {}
    for tag in (*_ARRAYS, _DIRS):
        present = spans[:, tag] >= 0
        c = at(spans[:, tag])
        width = 16 if tag == _DIRS else 4
        ok &= ~present | ((c < 0x80) & (sizes[:, tag] == 1 + np.maximum(c - 1, 0) * width))
        counts[tag] = np.where(present, c, -1)  # -1 absent, 0 null, else N + 1
    good = np.flatnonzero(ok)
    if not len(good):
        return out
    s = starts[good]
    word = buf[(s[:, None] + 3 + np.arange(4)).ravel()].view(">i4")
    partition = word.astype(np.int64).tolist()
    raws = bytes(buf[(s[:, None] + 7 + np.arange(16)).ravel()])
    topics = _uuid_texts([raws[i : i + 16] for i in range(0, len(raws), 16)])
    lead = spans[good, _LEADER]
    leader_v = buf[(np.maximum(lead, 0)[:, None] + np.arange(4)).ravel()].view(">i4")
    leader = np.where(lead >= 0, leader_v, -2).tolist()
    lrs_at = spans[good, _LRS]
    lrs_v = buf[np.maximum(lrs_at, 0)].view(np.int8).astype(np.int64)
    lrs = np.where(lrs_at >= 0, lrs_v, -1).tolist()
    arrays = {tag: _int_arrays(buf, spans[good, tag], counts[tag][good]) for tag in _ARRAYS}
    for i, row in enumerate(
        zip(
            topics,
            partition,
            arrays[_ISR],
            leader,
            arrays[_REPLICAS],
            arrays[_REMOVING],
            arrays[_ADDING],
            lrs,
            arrays[_ELR],
            arrays[_LKELR],
            strict=True,
        )
    ):
        out[good[i]] = row
    return out


def _int_arrays(buf: np.ndarray, span: np.ndarray, count: np.ndarray) -> list[Any]:
    """Per value: None (absent or null) or the tuple of its int32 elements."""
    n_el = np.maximum(count - 1, 0)
    if not n_el.any():
        return [None if c <= 0 else () for c in count.tolist()]
    first = span + 1
    total = int(n_el.sum())
    # the element positions of every value, one after another
    owner = np.repeat(np.arange(len(span)), n_el)
    offs = np.cumsum(n_el) - n_el
    k = np.arange(total) - offs[owner]
    pos = first[owner] + 4 * k
    flat = buf[(pos[:, None] + np.arange(4)).ravel()].view(">i4").tolist()
    bounds = np.concatenate([[0], np.cumsum(n_el)]).tolist()
    return [
        None if c <= 0 else tuple(flat[bounds[i] : bounds[i + 1]])
        for i, c in enumerate(count.tolist())
    ]
