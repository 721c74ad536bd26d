"""The ``quorum-state`` file (DESIGN 1.5): the Raft election state that must survive a crash.

It holds ``{"leader_epoch", "leader_id", "voted_id"}`` as JSON (-1 for none, as
Kafka's quorum-state file does). It is replaced atomically and durably: the new
content goes to ``quorum-state.tmp``, is fsynced, renamed over the old file and
the directory is fsynced, so after a crash the file is either the old or the new
state, never a mix. The shell writes it before it sends a vote grant or a
BeginQuorumEpoch (kraft.raft.ready's order), which is what makes "one vote per
epoch" and "epochs never go back" hold across restarts.

A file that exists but cannot be parsed is an error naming the file: guessing
an empty state could let this node vote twice in one epoch.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kraft.raft.state import ElectionState
from metadata_log.checkpoints import TMP_SUFFIX, write_atomic

FILE_NAME = "quorum-state"


class QuorumStateError(Exception):
    """The quorum-state file exists but is not what this module writes."""


class QuorumStateFile:
    def __init__(self, data_dir: str | Path) -> None:
        self.path = Path(data_dir) / FILE_NAME

    def read(self) -> ElectionState:
        """The persisted election state; the initial state when there is no file yet."""
        # A leftover tmp file is an interrupted write: the rename did not happen,
        # so the old file (or none) is the truth.
        tmp = self.path.with_name(self.path.name + TMP_SUFFIX)
        if tmp.exists():
            tmp.unlink()
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return ElectionState()
        try:
            obj = json.loads(raw)
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
            return ElectionState.from_json(obj)
        except (ValueError, KeyError, UnicodeDecodeError) as e:
            raise QuorumStateError(f"bad quorum-state file {self.path}: {e}") from None

    def write(self, state: ElectionState) -> None:
        """Replace the file durably (tmp + fsync + rename + directory fsync).

        Raises OSError as is: the caller stops the node, as a failed fsync is never
        retried (the kernel may have dropped the dirty pages).
        """
        body = dict(state.to_json())
        body["data_version"] = 0
        data = (json.dumps(body, sort_keys=True) + "\n").encode()
        os.makedirs(self.path.parent, exist_ok=True)
        write_atomic(self.path, data)
