"""`kraft dump-log`: batch headers and decoded records of segments and snapshots.

Like `kafka-dump-log --cluster-metadata-decoder`. An incomplete batch at the very
end of a file is the end of data (a live log may be mid-append); a complete batch
that fails its checksum, or a record that cannot be decoded, is an error naming
the file and offset.
"""

from __future__ import annotations

import json
import mmap
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from metadata_log.batch import BatchHeader, decode_records, iter_headers
from metadata_log.errors import IncompleteBatchError, MetadataLogError
from metadata_log.records import Record, record_fields, record_type_name
from metadata_log.replay import metadata_dir, segment_files, snapshot_files


def files_to_dump(target: Path) -> list[Path]:
    """A file as given, or a directory's snapshots then segments in offset order."""
    if target.is_file():
        return [target]
    if not target.exists():
        raise MetadataLogError(f"{target}: no such file or directory")
    directory = metadata_dir(target)
    files = [p for _, _, p in snapshot_files(directory)] + [p for _, p in segment_files(directory)]
    if not files:
        raise MetadataLogError(f"{directory}: no .log segments or .checkpoint snapshots")
    return files


def iter_file(path: Path) -> Iterator[tuple[int, BatchHeader, list[Record] | None, str | None]]:
    """(position, header, records, torn-tail note) for each batch of one file."""
    with path.open("rb") as f:
        size = path.stat().st_size
        if size == 0:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            name = str(path)
            try:
                for pos, header in iter_headers(data, name):
                    yield pos, header, decode_records(data, pos, header, name), None
            except IncompleteBatchError as e:
                yield e.position, None, None, str(e)  # type: ignore[misc]


def dump(target: Path, as_json: bool, from_offset: int, out: TextIO) -> None:
    for path in files_to_dump(target):
        if not as_json:
            print(f"Dumping {path}", file=out)
        for pos, h, records, torn in iter_file(path):
            if h is None:
                if not as_json:
                    print(f"End of data at position {pos}: {torn}", file=out)
                break
            if h.last_offset < from_offset:
                continue
            if not as_json:
                print(
                    f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
                    f"epoch: {h.leader_epoch} appendTime: {h.append_time_ms} "
                    f"isControl: {str(h.control).lower()} position: {pos} size: {h.length} "
                    f"crc: {h.records_crc}",
                    file=out,
                )
            assert records is not None
            for i, rec in enumerate(records):
                offset = h.base_offset + i
                if offset < from_offset:
                    continue
                fields = record_fields(rec)
                if as_json:
                    out.write(
                        json.dumps(
                            {
                                "offset": offset,
                                "base_offset": h.base_offset,
                                "epoch": h.leader_epoch,
                                "append_time_ms": h.append_time_ms,
                                "control": h.control,
                                "type": record_type_name(rec),
                                "fields": fields,
                            },
                            separators=(",", ":"),
                        )
                        + "\n"
                    )
                else:
                    print(
                        f"| offset: {offset} {record_type_name(rec)} "
                        f"{json.dumps(fields, separators=(',', ':'))}",
                        file=out,
                    )


def run(target: str, as_json: bool = False, from_offset: int = 0) -> int:
    try:
        dump(Path(target), as_json, from_offset, sys.stdout)
    except MetadataLogError as e:
        sys.stdout.flush()
        print(f"kraft dump-log: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except OSError as e:  # unreadable file or directory: a user error, not a traceback
        sys.stdout.flush()
        print(f"kraft dump-log: error: {e.filename or target}: {e.strerror or e}", file=sys.stderr)
        return 1
    return 0
