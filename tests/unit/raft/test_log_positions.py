"""Kafka's validateOffsetAndEpoch and the follower's truncation offset, on plain logs.

These rules were inline in the core's Fetch handlers; as log_positions
functions they are checked here against the cases Kafka's
KafkaRaftClientTest names: a valid position, a diverging one, one below the
log start, and a log trimmed to a snapshot that no longer holds its epoch.
"""

from __future__ import annotations

from kraft.raft import log_positions
from kraft.raft.log_positions import SNAPSHOT, VALID, truncation_offset, validate_fetch
from kraft.raft.messages import DivergingEpoch
from metadata_log.snapshot import SnapshotId
from tests.unit.raft.helpers import build_log


def test_a_fetch_at_the_end_of_a_matching_epoch_is_valid() -> None:
    log = build_log([(1, 0, 3), (2, 3, 6)])
    assert validate_fetch(log, 6, 2) is VALID
    assert validate_fetch(log, 3, 1) is VALID  # the end of epoch 1 is offset 3


def test_an_empty_follower_fetching_from_zero_is_valid() -> None:
    assert validate_fetch(build_log([(1, 0, 3)]), 0, 0) is VALID


def test_a_fetch_past_its_epochs_end_diverges_at_that_end() -> None:
    log = build_log([(1, 0, 3), (3, 3, 6)])
    # The follower holds offsets 3..4 of epoch 2, which the leader never had.
    position = validate_fetch(log, 5, 2)
    assert position.kind == "DIVERGING"
    assert position.diverging == DivergingEpoch(1, 3)


def test_a_fetch_below_the_log_start_asks_for_the_snapshot() -> None:
    log = build_log([(1, 0, 4), (2, 4, 8)])
    log.create_snapshot(SnapshotId(4, 1), b"snap")
    log.delete_segments_below(4)
    assert validate_fetch(log, 2, 1) is SNAPSHOT


def test_the_snapshots_epoch_still_matches_after_the_log_is_trimmed_to_it() -> None:
    # A follower that loaded the snapshot (end 4, epoch 1) fetches at 4 with
    # last epoch 1: the trimmed log's epoch cache starts at epoch 2, yet the
    # position is valid, or the follower would load the snapshot forever.
    log = build_log([(1, 0, 4), (2, 4, 8)])
    log.create_snapshot(SnapshotId(4, 1), b"snap")
    log.delete_segments_below(4)
    assert log_positions.end_offset_for_epoch(log, 1) == (1, 4)
    assert validate_fetch(log, 4, 1) is VALID


def test_a_follower_truncates_to_the_smaller_end_of_the_same_epoch() -> None:
    # Uncommitted data of a deposed leader of epoch 2 past the leader's end of 2.
    follower = build_log([(1, 0, 3), (2, 3, 8)])
    assert truncation_offset(follower, DivergingEpoch(2, 5)) == 5


def test_a_follower_without_so_old_an_epoch_truncates_its_whole_log() -> None:
    follower = build_log([(3, 0, 4)])
    assert truncation_offset(follower, DivergingEpoch(2, 2)) == 0


def test_a_follower_truncates_to_its_own_end_of_an_older_epoch() -> None:
    # Leader: epoch 2 ends at 6; follower's largest epoch <= 2 is 1, ending at 3.
    follower = build_log([(1, 0, 3), (4, 3, 7)])
    assert truncation_offset(follower, DivergingEpoch(2, 6)) == 3
