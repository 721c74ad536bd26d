"""`kraft cluster up` says why a node exited: the last line of its log (last_words)."""

from __future__ import annotations

import json
from pathlib import Path

from kraft.local.cluster import last_words


def test_a_plain_error_line_is_given_as_it_is(tmp_path: Path) -> None:
    log = tmp_path / "controller-1.log"
    error = (
        "kraft controller: error: corrupt batch in seg/00000000000000000230.log at offset "
        "148 (file position 0): segment starts at offset 230, the log continues at 148"
    )
    first = {"ts": "t", "level": "INFO", "msg": "controller activated"}
    log.write_text(json.dumps(first) + "\n" + error + "\n\n")
    assert last_words(log) == error


def test_a_json_line_gives_its_message_and_an_error_it_does_not_hold(tmp_path: Path) -> None:
    log = tmp_path / "broker-4.log"
    log.write_text(json.dumps({"level": "ERROR", "msg": "fatal", "error": "disk full"}) + "\n")
    assert last_words(log) == "fatal: disk full"
    log.write_text(json.dumps({"msg": "stopping after a fatal error: x", "error": "x"}) + "\n")
    assert last_words(log) == "stopping after a fatal error: x"


def test_long_empty_and_missing_logs(tmp_path: Path) -> None:
    log = tmp_path / "n.log"
    log.write_text("a" * 10_000 + "\n" + "b" * 400)
    words = last_words(log)
    assert words == "b" * 297 + "..."
    log.write_text("")
    assert last_words(log) == "(nothing in its log)"
    assert last_words(tmp_path / "absent.log").startswith("(its log cannot be read: ")
