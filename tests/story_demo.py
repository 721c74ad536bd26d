"""The offline story demo: write the scripted cluster story as a real metadata log, then dump it.

The log is written through metadata_log's FileLog (segments, index, epoch cache,
fsync), snapshotted, and printed with `kraft dump-log`, then replayed back into a
MetadataImage whose final state is printed. Run: `python -m tests.story_demo [--data-dir DIR]`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from kraft.tools.dump_log import run as dump_log
from metadata_log.batch import encode_batch
from metadata_log.file_log import FileLog
from metadata_log.replay import METADATA_DIR_NAME, replay_log
from metadata_log.snapshot import SnapshotId, write_snapshot
from tests.cluster_story import StoryBatch, cluster_story, story_image


def write_story(data_dir: Path, batches: list[StoryBatch]) -> Path:
    """Append the story's batches to a fresh log in `data_dir`; returns the log dir."""
    log_dir = data_dir / METADATA_DIR_NAME
    if log_dir.exists():
        shutil.rmtree(log_dir)
    with FileLog.open(log_dir) as log:
        for b in batches:
            log.append(
                encode_batch(b.base_offset, b.leader_epoch, b.append_time_ms, b.records, b.control)
            )
        log.flush()
    return log_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kraft-story-demo", description=__doc__)
    parser.add_argument(
        "--data-dir", default="demo-data", help="where to write the log (default: demo-data)"
    )
    args = parser.parse_args(argv)
    data_dir = Path(args.data_dir)
    batches = cluster_story()

    print("== kraft-py demo: a small cluster story written as a real __cluster_metadata log")
    for b in batches:
        print(f"  offset {b.base_offset:>3}  {b.note}")
    log_dir = write_story(data_dir, batches)
    image = story_image(batches)
    snap = write_snapshot(
        log_dir,
        SnapshotId(image.offset + 1, batches[-1].leader_epoch),
        list(image.to_records()),
        last_contained_log_time=image.last_append_time_ms,
        append_time_ms=image.last_append_time_ms,
    )
    print(f"\n== wrote {log_dir} and snapshot {snap.name}\n")
    print(f"== kraft dump-log {log_dir}")
    rc = dump_log(str(log_dir))
    if rc != 0:
        return rc

    replayed = replay_log(data_dir)
    if not replayed.state_equals(image):
        print("replayed image differs from the story's image", file=sys.stderr)
        return 1
    print(f"\n== state replayed from disk at offset {replayed.offset}")
    for bid, b in sorted(replayed.brokers.items()):
        state = "FENCED" if b.fenced else "UNFENCED"
        if b.in_controlled_shutdown:
            state += " (controlled shutdown)"
        print(f"  broker {bid} epoch {b.broker_epoch} rack {b.rack}: {state}")
    for name, tid in sorted(replayed.topic_ids_by_name.items()):
        for pid, p in sorted(replayed.topics[tid].partitions.items()):
            print(
                f"  {name}-{pid}: leader {p.leader} isr {list(p.isr)} replicas {list(p.replicas)} "
                f"leader_epoch {p.leader_epoch} partition_epoch {p.partition_epoch}"
            )
    print(f"\nTry: .venv/bin/kraft dump-log {log_dir} --json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
