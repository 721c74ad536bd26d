"""`kraft reassign-partitions`: Kafka's kafka-reassign-partitions tool (KIP-455).

The same four actions and the same JSON files as Kafka's tool:

- `--generate --topics-to-move-json-file F --broker-list 4,5,6`: F is
  `{"version":1,"topics":[{"topic":"foo"}]}`; prints the current assignment of
  those topics and a proposal that places them on the listed brokers with the
  controller's own rack-aware placement (kraft.controller.placement, Kafka's
  AdminUtils), keeping each partition's replication factor. Nothing is written.
- `--execute --reassignment-json-file F`: F is
  `{"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..]}]}`
  (`log_dirs` is accepted and ignored: this project has one directory per broker);
  prints the current assignment (to keep for a rollback) and starts the plan.
- `--verify --reassignment-json-file F`: per partition, completed or still in
  progress. Exit 0 only when every one is complete (1 otherwise), so a script can
  wait for it; Kafka's tool prints the same lines.
- `--cancel --reassignment-json-file F`: cancels those of F's partitions that are
  being reassigned (as Kafka's tool, which lists them first): their replicas go
  back to the original ones.

Errors print `ERROR_CODE: message` (the controller's, Kafka's names) and exit 1.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kraft.admin_client import AdminClient, ClientError
from kraft.arg_types import parse_node_ids
from kraft.controller.errors import ApiError
from kraft.controller.placement import place_replicas
from kraft.controller.topics import validate_topic_name
from kraft.tools.admin import add_bootstrap, run_with_client

PartitionKey = tuple[str, int]


class PlanError(ValueError):
    """A JSON file or an option the tool cannot use (names the problem)."""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "reassign-partitions",
        help="move partition replicas between brokers (like kafka-reassign-partitions)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--generate", action="store_true", help="propose a plan (writes nothing)")
    action.add_argument("--execute", action="store_true", help="start the plan of the file")
    action.add_argument("--verify", action="store_true", help="is the plan of the file done?")
    action.add_argument("--cancel", action="store_true", help="cancel the plan of the file")
    p.add_argument("--topics-to-move-json-file", metavar="FILE", help="for --generate")
    p.add_argument("--broker-list", metavar="IDS", help="for --generate: e.g. 4,5,6")
    p.add_argument(
        "--disable-rack-aware", action="store_true", help="--generate ignores the brokers' racks"
    )
    p.add_argument("--reassignment-json-file", metavar="FILE", help="the plan")
    add_bootstrap(p)


# ---------------------------------------------------------------- JSON files (pure)


def _load(path: str | None, option: str) -> Any:
    if not path:
        raise PlanError(f"{option} is required for this action")
    try:
        return json.loads(Path(path).read_text())
    except OSError as e:
        raise PlanError(f"cannot read {option} {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise PlanError(f"{option} {path} is not JSON: {e}") from None


def _check_version(doc: Any, what: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise PlanError(f"{what} must be a JSON object")
    if doc.get("version", 1) != 1:
        raise PlanError(f"{what}: unsupported version {doc.get('version')!r} (only 1)")
    return doc


def _check_topic(name: str, where: str) -> None:
    """A legal topic name (the controller's rule): nothing else reaches a URL path."""
    try:
        validate_topic_name(name)
    except ApiError as e:
        raise PlanError(f"{where}: {e.message}") from None


def parse_topics_to_move(doc: Any) -> list[str]:
    """`{"version":1,"topics":[{"topic":"foo"},...]}` -> topic names, in order."""
    doc = _check_version(doc, "the topics-to-move file")
    topics = doc.get("topics")
    if not isinstance(topics, list) or not topics:
        raise PlanError('the topics-to-move file needs a non-empty "topics" list')
    names: list[str] = []
    for i, t in enumerate(topics):
        name = t.get("topic") if isinstance(t, dict) else None
        if not isinstance(name, str) or not name:
            raise PlanError(f'topics[{i}] needs a "topic" name')
        _check_topic(name, f"topics[{i}]")
        if name not in names:
            names.append(name)
    return names


def parse_plan(doc: Any, allow_null: bool = False) -> list[dict[str, Any]]:
    """A reassignment file's partitions as `{topic, partition, replicas}` (log_dirs
    dropped). Duplicate partitions are refused, as Kafka's tool does; replica lists
    are checked by the controller (INVALID_REPLICA_ASSIGNMENT)."""
    doc = _check_version(doc, "the reassignment file")
    parts = doc.get("partitions")
    if not isinstance(parts, list) or not parts:
        raise PlanError('the reassignment file needs a non-empty "partitions" list')
    out: list[dict[str, Any]] = []
    seen: set[PartitionKey] = set()
    for i, p in enumerate(parts):
        if not isinstance(p, dict):
            raise PlanError(f"partitions[{i}] must be an object")
        topic, partition, replicas = p.get("topic"), p.get("partition"), p.get("replicas")
        if not isinstance(topic, str) or not topic:
            raise PlanError(f'partitions[{i}] needs a "topic" name')
        _check_topic(topic, f"partitions[{i}]")
        if type(partition) is not int or partition < 0:
            raise PlanError(f'partitions[{i}] needs a non-negative integer "partition"')
        ok_null = allow_null and replicas is None
        if not ok_null and (
            not isinstance(replicas, list) or any(type(r) is not int for r in replicas)
        ):
            raise PlanError(f'partitions[{i}] ({topic}-{partition}) needs a "replicas" list of ids')
        if (topic, partition) in seen:
            raise PlanError(f"partition {topic}-{partition} appears more than once")
        seen.add((topic, partition))
        out.append({"topic": topic, "partition": partition, "replicas": replicas})
    return out


def parse_broker_list(text: str | None) -> list[int]:
    if not text:
        raise PlanError("--broker-list is required for --generate")
    try:
        return parse_node_ids(text)
    except ValueError as e:
        raise PlanError(f"--broker-list: {e}") from None


def plan_json(partitions: list[dict[str, Any]]) -> str:
    """Kafka's file format, one line, partitions sorted, log_dirs `any`."""
    rows = [
        {
            "topic": p["topic"],
            "partition": p["partition"],
            "replicas": list(p["replicas"]),
            "log_dirs": ["any"] * len(p["replicas"]),
        }
        for p in sorted(partitions, key=lambda p: (p["topic"], p["partition"]))
    ]
    return json.dumps({"version": 1, "partitions": rows}, separators=(",", ":"))


def propose(
    current: Mapping[str, list[list[int]]],
    brokers: Mapping[int, str | None],
    rng: random.Random,
    rack_aware: bool = True,
) -> list[dict[str, Any]]:
    """A new assignment of every partition of `current` (topic -> replica lists by
    partition id) over `brokers` (id -> rack), each topic placed as a new topic of
    its partition count and replication factor would be (Kafka's generate)."""
    if rack_aware:
        with_rack = [b for b, r in brokers.items() if r is not None]
        if with_rack and len(with_rack) != len(brokers):
            missing = sorted(b for b, r in brokers.items() if r is None)
            raise PlanError(
                f"not all brokers have rack information (none for {missing}); "
                "add --disable-rack-aware to place them without racks"
            )
    else:
        brokers = {b: None for b in brokers}
    out: list[dict[str, Any]] = []
    for topic, parts in current.items():
        rf = len(parts[0]) if parts else 0
        if rf > len(brokers):
            raise PlanError(
                f"topic {topic} has replication factor {rf}, more than the "
                f"{len(brokers)} brokers of --broker-list"
            )
        for pid, replicas in enumerate(place_replicas(brokers, len(parts), rf, rng)):
            out.append({"topic": topic, "partition": pid, "replicas": list(replicas)})
    return out


def verify_lines(
    plan: list[dict[str, Any]],
    replicas_now: Mapping[PartitionKey, list[int]],
    ongoing: set[PartitionKey],
) -> tuple[list[str], bool]:
    """Kafka's --verify lines for the plan, and whether every reassignment is done."""
    lines = ["Status of partition reassignment:"]
    done = True
    for p in plan:
        key = (p["topic"], p["partition"])
        name = f"{key[0]}-{key[1]}"
        now = replicas_now.get(key)
        if key in ongoing:
            lines.append(f"Reassignment of partition {name} is still in progress.")
            done = False
        elif now is None:
            lines.append(f"Partition {name} does not exist.")
            done = False
        elif list(now) == list(p["replicas"]):
            lines.append(f"Reassignment of partition {name} is completed.")
        else:
            lines.append(
                f"There is no active reassignment of partition {name}, but replica set is "
                f"{','.join(map(str, now))} rather than {','.join(map(str, p['replicas']))}."
            )
            done = False
    return lines, done


# ---------------------------------------------------------------- actions (I/O)


async def _current(client: AdminClient, topics: list[str]) -> dict[str, list[list[int]]]:
    out: dict[str, list[list[int]]] = {}
    for name in topics:
        t = await client.describe_topic(name)
        parts = sorted(t.get("partitions", []), key=lambda p: p["partition_id"])
        out[name] = [list(p["replicas"]) for p in parts]
    return out


def _flatten(current: Mapping[str, list[list[int]]]) -> list[dict[str, Any]]:
    return [
        {"topic": t, "partition": pid, "replicas": r}
        for t, parts in current.items()
        for pid, r in enumerate(parts)
    ]


async def _generate(client: AdminClient, args: argparse.Namespace) -> int:
    topics = parse_topics_to_move(
        _load(args.topics_to_move_json_file, "--topics-to-move-json-file")
    )
    ids = parse_broker_list(args.broker_list)
    registered = {b["broker_id"]: b.get("rack") for b in await client.brokers()}
    unknown = [b for b in ids if b not in registered]
    if unknown:
        raise PlanError(f"--broker-list names brokers that are not registered: {unknown}")
    current = await _current(client, topics)
    proposal = propose(
        current, {b: registered[b] for b in ids}, random.Random(), not args.disable_rack_aware
    )
    print("Current partition replica assignment")
    print(plan_json(_flatten(current)))
    print()
    print("Proposed partition reassignment configuration")
    print(plan_json(proposal))
    return 0


async def _ongoing(client: AdminClient) -> set[PartitionKey]:
    res = await client.list_partition_reassignments()
    return {(r["topic"], r["partition"]) for r in res.get("partitions", [])}


async def _execute(client: AdminClient, args: argparse.Namespace) -> int:
    plan = parse_plan(_load(args.reassignment_json_file, "--reassignment-json-file"))
    topics = sorted({p["topic"] for p in plan})
    try:
        current = await _current(client, topics)
    except ClientError as e:
        if e.code != "UNKNOWN_TOPIC_OR_PARTITION":
            raise
        current = {}  # the controller names the unknown topic below
    before = [
        {"topic": p["topic"], "partition": p["partition"], "replicas": parts[p["partition"]]}
        for p in plan
        if (parts := current.get(p["topic"])) is not None and p["partition"] < len(parts)
    ]
    await client.alter_partition_reassignments(plan)
    print("Current partition replica assignment")
    print()
    print(plan_json(before))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    names = ",".join(f"{p['topic']}-{p['partition']}" for p in plan)
    print(f"Successfully started partition reassignments for {names}")
    return 0


async def _verify(client: AdminClient, args: argparse.Namespace) -> int:
    plan = parse_plan(_load(args.reassignment_json_file, "--reassignment-json-file"))
    ongoing = await _ongoing(client)
    replicas_now: dict[PartitionKey, list[int]] = {}
    for topic in sorted({p["topic"] for p in plan}):
        try:
            t = await client.describe_topic(topic)
        except ClientError as e:
            if e.code != "UNKNOWN_TOPIC_OR_PARTITION":
                raise
            continue
        for part in t.get("partitions", []):
            replicas_now[(topic, part["partition_id"])] = list(part["replicas"])
    lines, done = verify_lines(plan, replicas_now, ongoing)
    print("\n".join(lines))
    return 0 if done else 1


async def _cancel(client: AdminClient, args: argparse.Namespace) -> int:
    plan = parse_plan(
        _load(args.reassignment_json_file, "--reassignment-json-file"), allow_null=True
    )
    ongoing = await _ongoing(client)
    active = [p for p in plan if (p["topic"], p["partition"]) in ongoing]
    if not active:
        print("None of the specified partition reassignments are active.")
        return 0
    await client.alter_partition_reassignments(
        [{"topic": p["topic"], "partition": p["partition"], "replicas": None} for p in active]
    )
    names = ",".join(f"{p['topic']}-{p['partition']}" for p in active)
    print(f"Successfully cancelled partition reassignments for: {names}")
    return 0


def run(args: argparse.Namespace) -> int:
    action = (
        _generate
        if args.generate
        else _execute
        if args.execute
        else _verify
        if args.verify
        else _cancel
    )
    return run_with_client("kraft reassign-partitions", args, action, usage_errors=(PlanError,))
