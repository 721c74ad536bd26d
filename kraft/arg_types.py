"""argparse types for the command lines, refused with a usage line that names the
value (exit 2): an integer, with a lower bound when one is given; a port; a
KEY=VALUE; a number of seconds above 0; a directory id."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable


def whole_number(least: int | None = None, unit: str = "") -> Callable[[str], int]:
    """An argparse `type`: an int >= `least` (any int when None); `unit` names it
    in the messages ("days")."""
    what = f"a whole number of {unit}" if unit else "an integer"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if least is not None and value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
        return value

    return parse


def port_number(text: str) -> int:
    """An argparse `type`: a TCP port, 0..65535 (bind() refuses more with a traceback,
    and a port taken modulo 65536 would be another one)."""
    value = whole_number()(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is in 0..65535, got {value}")
    return value


def key_value(text: str) -> tuple[str, str]:
    """An argparse `type`: KEY=VALUE as (key, value), both stripped; the value may be
    empty, the key may not."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key.strip(), value.strip()


def positive_seconds(text: str) -> float:
    """An argparse `type`: a finite number of seconds above 0 (a timeout)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value


_DIRECTORY_ID = re.compile(r"[A-Za-z0-9_-]{22}")


def directory_id(text: str) -> str:
    """An argparse `type`: a directory id as Kafka prints a Uuid (22 base64url
    characters; meta.properties' directory.id)."""
    if not _DIRECTORY_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a directory id (22 base64url characters: the directory.id "
            "of the controller's meta.properties, or `kraft quorum describe --replication`)"
        )
    return text


def topic_name(text: str) -> str:
    """An argparse `type`: a legal topic name, by the controller's own rule (1-249 of
    [a-zA-Z0-9._-], not "." or ".."), so that nothing else reaches the URL path."""
    from kraft.controller.errors import ApiError
    from kraft.controller.topics import validate_topic_name

    try:
        validate_topic_name(text)
    except ApiError as e:
        raise argparse.ArgumentTypeError(e.message) from None
    return text


_NODE_ID = re.compile(r"[0-9]+")


def parse_node_ids(text: str, sep: str = ",") -> list[int]:
    """Node ids separated by `sep` ("4,5,6" -> [4, 5, 6]): distinct ASCII decimal
    ids, none empty ("1,,2"), none in Python's other int forms ("1_0" is 10 to
    int()). ValueError names the entry."""
    ids: list[int] = []
    for i, entry in enumerate(text.split(sep)):
        entry = entry.strip()
        if not _NODE_ID.fullmatch(entry):
            raise ValueError(f"entry {i + 1} of {text!r} is not a node id: {entry!r}")
        if int(entry) in ids:
            raise ValueError(f"node id {int(entry)} appears twice in {text!r}")
        ids.append(int(entry))
    return ids


def node_ids(text: str) -> list[int]:
    """An argparse `type`: parse_node_ids."""
    try:
        return parse_node_ids(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def replica_assignment(text: str) -> list[list[int]]:
    """An argparse `type`: "1:2:3,2:3:1" -> [[1, 2, 3], [2, 3, 1]] (partition 0 on
    1,2,3; partition 1 on 2,3,1), as kafka-topics' --replica-assignment."""
    out = []
    for p, part in enumerate(text.split(",")):
        try:
            out.append(parse_node_ids(part, ":"))
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"partition {p} ({part.strip()!r}): {e}") from None
    return out
