"""The clean shutdown file of KIP-966: the broker epoch a broker had when it last
shut down cleanly, so that its next registration can say so.

Kafka writes `.kafka_cleanshutdown` (with the broker epoch) in each log dir when a
broker stops cleanly and deletes it at start-up; a broker that crashed has none
and registers with PreviousBrokerEpoch -1, and the controller then takes it out of
every ELR (its log may have lost acknowledged records). The agent does the same in
its data dir (`broker-agent --data-dir`): `take` at start (read, then delete, so a
crash later reads as unclean), `write` after a granted controlled shutdown.
A file that cannot be read as one is treated as absent (unclean), and logged.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from metadata_log.checkpoints import fsync_dir, write_atomic

log = logging.getLogger("broker_agent")

FILE_NAME = ".kafka_cleanshutdown"
NO_EPOCH = -1


def take(data_dir: str | Path) -> int:
    """The epoch of the last clean shutdown (-1: none), and delete the file."""
    path = Path(data_dir) / FILE_NAME
    try:
        text = path.read_bytes().decode()
    except FileNotFoundError:
        return NO_EPOCH
    except (OSError, UnicodeDecodeError) as e:
        # not UTF-8, a directory, no permission: no epoch to trust (and the agent
        # must start: an unclean shutdown is the safe reading)
        text, reason = "", str(e)
    else:
        reason = "not a clean shutdown record"
    epoch = NO_EPOCH
    try:
        doc = json.loads(text) if text else None
        value = doc.get("broker_epoch") if isinstance(doc, dict) else None
        if type(value) is int and value >= 0:
            epoch = value
    except json.JSONDecodeError:
        pass
    if epoch == NO_EPOCH:
        log.warning(
            "clean shutdown file unreadable (%s): treated as an unclean shutdown",
            reason,
            extra={"event": "clean_shutdown_file_invalid", "path": str(path)},
        )
    try:
        path.unlink()
        fsync_dir(path.parent)
    except OSError as e:
        # left as it is (a directory, say): the next clean shutdown cannot write
        # over it either, and says so; every start reads as unclean until it goes
        log.warning(
            "clean shutdown file %s cannot be removed: %s",
            path,
            e,
            extra={"event": "clean_shutdown_file_invalid", "path": str(path)},
        )
    return epoch


def write(data_dir: str | Path, broker_epoch: int) -> None:
    """Persist `broker_epoch` (tmp file, fsync, rename: never half a file)."""
    directory = Path(data_dir)
    directory.mkdir(parents=True, exist_ok=True)
    doc = {"version": 0, "broker_epoch": broker_epoch}
    write_atomic(directory / FILE_NAME, json.dumps(doc).encode())
