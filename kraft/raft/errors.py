"""The Raft layer's exceptions, defined once for the pure core and its shells.

The core raises them, the asyncio driver (kraft.raft_shell.driver) and the
controller's HTTP shell let them through unchanged: a caller catches one class
whichever layer refused (issue 24: no copies translated into each other).
"""

from __future__ import annotations


class NotLeaderError(Exception):
    """This node does not lead (a claimed epoch) any more, or never did; carries the
    leader it knows of (None: unknown) and its epoch, so a caller can redirect."""

    def __init__(self, leader_id: int | None, epoch: int) -> None:
        self.leader_id = leader_id
        self.epoch = epoch
        super().__init__(f"not the leader (leader {leader_id}, epoch {epoch})")


class TruncationBelowHighWatermarkError(Exception):
    """A leader asked us to truncate committed data: a broken safety property."""


class ReconfigError(Exception):
    """An AddVoter / RemoveVoter the leader refuses; `code` is a Kafka-style error name.

    `retriable`: the condition may clear by itself (the leader has not committed
    an offset of its epoch yet, the new voter has not caught up): the shell may
    wait, bounded, and ask again.
    """

    def __init__(self, code: str, message: str, retriable: bool = False) -> None:
        self.code = code
        self.retriable = retriable
        super().__init__(message)


# ReconfigError codes (Kafka's error names for AddRaftVoter / RemoveRaftVoter).
CONCURRENT_VOTER_CHANGE = "CONCURRENT_VOTER_CHANGE"
LEADER_NOT_READY = "LEADER_NOT_READY"
VOTER_NOT_CAUGHT_UP = "VOTER_NOT_CAUGHT_UP"
DUPLICATE_VOTER = "DUPLICATE_VOTER"
VOTER_NOT_FOUND = "VOTER_NOT_FOUND"
INVALID_VOTER_CHANGE = "INVALID_REQUEST"
