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
        text = path.read_text()
    except FileNotFoundError:
        return NO_EPOCH
    epoch = NO_EPOCH
    try:
        doc = json.loads(text)
        value = doc.get("broker_epoch") if isinstance(doc, dict) else None
        if type(value) is int and value >= 0:
            epoch = value
    except json.JSONDecodeError:
        pass
    if epoch == NO_EPOCH:
        log.warning(
            "clean shutdown file unreadable: treated as an unclean shutdown",
            extra={"event": "clean_shutdown_file_invalid", "path": str(path)},
        )
    path.unlink()
    fsync_dir(path.parent)
    return epoch


def write(data_dir: str | Path, broker_epoch: int) -> None:
    """Persist `broker_epoch` (tmp file, fsync, rename: never half a file)."""
    directory = Path(data_dir)
    directory.mkdir(parents=True, exist_ok=True)
    doc = {"version": 0, "broker_epoch": broker_epoch}
    write_atomic(directory / FILE_NAME, json.dumps(doc).encode())
