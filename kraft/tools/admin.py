"""Admin commands: `kraft topics|brokers|elect|quorum ...`, printed like Kafka's tools.

Each command talks to the quorum through AdminClient (any controller URL works;
NOT_CONTROLLER hints are followed). Errors print `ERROR_CODE: message` on stderr
and exit 1, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kraft.admin_client import AdminClient, ClientError
from kraft.arg_types import (
    directory_id,
    key_value,
    positive_seconds,
    replica_assignment,
    topic_name,
    whole_number,
)
from kraft.config import ConfigError
from kraft.security.client_security import COMMAND_CONFIG_ENV, from_command_config

DEFAULT_BOOTSTRAP = os.environ.get("KRAFT_BOOTSTRAP", "http://127.0.0.1:9093")


def add_bootstrap(
    p: argparse.ArgumentParser, timeout_s: float = 10.0, timeout_help: str = ""
) -> None:
    """--bootstrap, --timeout (seconds per request; `timeout_help` says what a
    longer default waits for) and --command-config."""
    p.add_argument(
        "--bootstrap",
        default=DEFAULT_BOOTSTRAP,
        metavar="URL[,URL...]",
        help="any controller's URL (default: $KRAFT_BOOTSTRAP or %(default)s)",
    )
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=timeout_s,
        help=f"seconds per request (default {timeout_s:g}{timeout_help})",
    )
    p.add_argument(
        "--command-config",
        default=None,
        metavar="FILE",
        help="client properties for a secured cluster: ssl.truststore.location, "
        "ssl.keystore.location, authentication.token.file (default: "
        f"${COMMAND_CONFIG_ENV})",
    )


def register(sub: Any) -> None:
    topics = sub.add_parser("topics", help="create, delete, list, describe and alter topics")
    tsub = topics.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = tsub.add_parser("create", help="create a topic")
    c.add_argument("--topic", required=True, type=topic_name)
    c.add_argument("--partitions", type=int, default=None)
    c.add_argument("--replication-factor", type=int, default=None)
    c.add_argument(
        "--replica-assignment",
        default=None,
        type=replica_assignment,
        help="explicit replicas: '1:2:3,2:3:1' (partition 0 on 1,2,3; partition 1 on 2,3,1); "
        "not with --partitions or --replication-factor",
    )
    c.add_argument(
        "--config",
        action="append",
        default=[],
        type=key_value,
        metavar="KEY=VALUE",
        help="a topic config (repeatable)",
    )
    d = tsub.add_parser("delete", help="delete a topic")
    d.add_argument("--topic", required=True, type=topic_name)
    tsub.add_parser("list", help="list topic names")
    ds = tsub.add_parser("describe", help="partitions, leaders and ISRs of one or all topics")
    ds.add_argument("--topic", default=None, type=topic_name)
    ac = tsub.add_parser("alter-configs", help="set or delete topic configs")
    ac.add_argument("--topic", required=True, type=topic_name)
    ac.add_argument(
        "--add-config", action="append", default=[], type=key_value, metavar="KEY=VALUE"
    )
    ac.add_argument("--delete-config", action="append", metavar="KEY")
    ap = tsub.add_parser("add-partitions", help="raise a topic's partition count")
    ap.add_argument("--topic", required=True, type=topic_name)
    ap.add_argument("--partitions", type=int, required=True, help="the new total count")
    for p in (c, d, ds, ac, ap, tsub.choices["list"]):
        add_bootstrap(p)

    brokers = sub.add_parser("brokers", help="list or unregister brokers")
    bsub = brokers.add_subparsers(dest="action", required=True, metavar="ACTION")
    bl = bsub.add_parser("list", help="registered brokers and their state")
    bu = bsub.add_parser("unregister", help="unregister a broker whose session has expired")
    bu.add_argument("--broker-id", type=int, required=True)
    for p in (bl, bu):
        add_bootstrap(p)

    e = sub.add_parser("elect", help="admin leader election (preferred or unclean)")
    e.add_argument("--topic", required=True, type=topic_name)
    e.add_argument("--partition", type=int, required=True)
    e.add_argument("--type", choices=("preferred", "unclean"), default="preferred")
    add_bootstrap(e)

    q = sub.add_parser("quorum", help="describe the controller quorum (like kafka-metadata-quorum)")
    qsub = q.add_subparsers(dest="action", required=True, metavar="ACTION")
    qd = qsub.add_parser("describe", help="leader, epoch, high watermark and replication state")
    mode = qd.add_mutually_exclusive_group()
    mode.add_argument("--status", action="store_true", help="the quorum's status (default)")
    mode.add_argument(
        "--replication",
        action="store_true",
        help="each voter's and observer's log end offset and lag",
    )
    qd.add_argument("--json", action="store_true", help="print the raw JSON view")
    add_bootstrap(qd)
    qa = qsub.add_parser(
        "add-controller",
        help="add a controller to the voters (KIP-853); it must be running and caught up",
        description=(
            "Add a voter: a controller started with --bootstrap-controllers that fetches from "
            "the leader and has caught up. Its directory id is in its meta.properties and in "
            "`kraft quorum describe --replication` (Observer rows). One change at a time."
        ),
    )
    qa.add_argument(
        "--node-id", type=whole_number(0), required=True, help="the new voter's node id"
    )
    qa.add_argument(
        "--directory-id", type=directory_id, required=True, help="the new voter's directory id"
    )
    qa.add_argument("--url", required=True, help="the new voter's URL (http://HOST:PORT)")
    qr = qsub.add_parser(
        "remove-controller",
        help="remove a voter (KIP-853), by node id and directory id",
        description=(
            "Remove a voter. The directory id must be the voter's (a replaced disk has a new "
            "one): see `kraft quorum describe --replication`. Removing the leader is allowed: "
            "it hands over once the change commits."
        ),
    )
    qr.add_argument("--node-id", type=whole_number(0), required=True)
    qr.add_argument("--directory-id", type=directory_id, required=True)
    for p in (qa, qr):
        # the leader waits up to this long (less a second) for a new voter to catch up
        # and for the change to commit
        add_bootstrap(
            p, timeout_s=60.0, timeout_help=": the leader waits for the voter and the commit"
        )


def _ids(ids: list[int] | None) -> str:
    return ",".join(map(str, ids or []))


def _print_topic(t: dict[str, Any]) -> None:
    parts = t.get("partitions", [])
    # while a partition moves, its replicas hold the old and the adding ones (Kafka's
    # TopicCommand counts replicas - adding_replicas)
    rf = len(parts[0]["replicas"]) - len(parts[0].get("adding_replicas") or []) if parts else 0
    configs = ",".join(f"{k}={v}" for k, v in sorted(t.get("configs", {}).items()))
    print(
        f"Topic: {t['name']}\tTopicId: {t['topic_id']}\tPartitionCount: {len(parts)}\t"
        f"ReplicationFactor: {rf}\tConfigs: {configs}"
    )
    for p in parts:
        extra = "\tLeaderRecoveryState: RECOVERING" if p.get("leader_recovery_state") == 1 else ""
        if "elr" in p:
            # KIP-966: the eligible leader replicas, as Kafka 4's describe prints them
            extra += f"\tElr: {_ids(p.get('elr'))}\tLastKnownElr: {_ids(p.get('last_known_elr'))}"
        if p.get("adding_replicas") or p.get("removing_replicas"):
            # KIP-455, as Kafka's describe prints an ongoing reassignment
            extra += (
                f"\tAdding Replicas: {_ids(p.get('adding_replicas'))}"
                f"\tRemoving Replicas: {_ids(p.get('removing_replicas'))}"
            )
        print(
            f"\tTopic: {t['name']}\tPartition: {p['partition_id']}\tLeader: {p['leader'] if p['leader'] >= 0 else 'none'}\t"
            f"Replicas: {','.join(map(str, p['replicas']))}\tIsr: {','.join(map(str, p['isr']))}\t"
            f"LeaderEpoch: {p['leader_epoch']}{extra}"
        )


async def _topics(client: AdminClient, args: argparse.Namespace) -> int:
    if args.action == "create":
        body: dict[str, Any] = {"name": args.topic, "configs": dict(args.config)}
        if args.replica_assignment is not None:
            if args.partitions is not None or args.replication_factor is not None:
                # as kafka-topics: the assignment says both
                raise ValueError(
                    "--replica-assignment cannot be used with --partitions or --replication-factor"
                )
            body["assignments"] = args.replica_assignment
        else:
            body["partitions"] = args.partitions if args.partitions is not None else 1
            body["replication_factor"] = (
                args.replication_factor if args.replication_factor is not None else 3
            )
        res = await client.create_topic(body)
        print(
            f"Created topic {res['name']} (topic id {res['topic_id']}, {res['partitions']} partitions)."
        )
    elif args.action == "delete":
        await client.delete_topic(args.topic)
        print(f"Deleted topic {args.topic}.")
    elif args.action == "list":
        for t in sorted(await client.list_topics(), key=lambda t: t["name"]):
            print(t["name"])
    elif args.action == "describe":
        names = (
            [args.topic]
            if args.topic
            else [t["name"] for t in sorted(await client.list_topics(), key=lambda t: t["name"])]
        )
        for name in names:
            _print_topic(await client.describe_topic(name))
    elif args.action == "alter-configs":
        configs: dict[str, str | None] = dict(args.add_config)
        configs.update({k: None for k in args.delete_config or []})
        if not configs:
            print("kraft topics: error: give --add-config and/or --delete-config", file=sys.stderr)
            return 2
        res = await client.alter_configs(args.topic, configs)
        print(
            f"Completed updating config for topic {args.topic}: {json.dumps(res.get('configs', {}), sort_keys=True)}"
        )
    elif args.action == "add-partitions":
        await client.add_partitions(args.topic, args.partitions)
        print(f"Topic {args.topic} now has {args.partitions} partitions.")
    return 0


def _broker_state(b: dict[str, Any]) -> str:
    if b.get("fenced"):
        return "FENCED"
    if b.get("in_controlled_shutdown"):
        return "CONTROLLED_SHUTDOWN"
    return "UNFENCED"


async def _brokers(client: AdminClient, args: argparse.Namespace) -> int:
    if args.action == "list":
        rows = await client.brokers()
        print(f"{'BrokerId':<9}{'State':<21}{'Epoch':<8}{'Rack':<10}Endpoints")
        for b in sorted(rows, key=lambda b: b["broker_id"]):
            eps = ",".join(f"{e['name']}://{e['host']}:{e['port']}" for e in b.get("endpoints", []))
            print(
                f"{b['broker_id']:<9}{_broker_state(b):<21}{b['broker_epoch']:<8}{b.get('rack') or '-':<10}{eps}"
            )
    else:
        await client.unregister_broker(args.broker_id)
        print(f"Unregistered broker {args.broker_id}.")
    return 0


async def _elect(client: AdminClient, args: argparse.Namespace) -> int:
    res = await client.elect(args.topic, args.partition, args.type)
    if res.get("changed"):
        print(
            f"Successfully completed {args.type} leader election for {args.topic}-{args.partition}: leader {res['leader']}."
        )
    else:
        print(
            f"Valid replica already elected for {args.topic}-{args.partition}: leader {res['leader']}."
        )
    return 0


def _ago(ts: int | None) -> str:
    if ts is None or ts < 0:
        return "-"
    return f"{max(0, int(time.time() * 1000) - ts)} ms ago"  # ts: a wall-clock timestamp


async def _leader_call(client: AdminClient, method: str, path: str, body: Any = None) -> Any:
    """Call the Raft leader once (NOT_CONTROLLER hints followed, a bounded number of
    times); unlike other commands a voter change is never retried on a timeout (it
    may have been applied)."""
    bases = list(client.urls)
    base = bases[0]
    tried = 0
    while True:
        try:
            return await client.call_once(base, method, path, body)
        except ClientError as e:
            tried += 1
            if tried >= 2 * len(bases) + 3:
                raise
            hint = (e.body or {}).get("leader_url") if e.code == "NOT_CONTROLLER" else None
            if hint:
                base = hint.rstrip("/")
            elif e.code in ("NOT_CONTROLLER", "NETWORK"):
                base = bases[tried % len(bases)]
                await asyncio.sleep(min(2.0, 0.2 * tried))
            else:
                raise


async def _voter_change(client: AdminClient, args: argparse.Namespace) -> int:
    timeout_ms = max(1000, int((args.timeout - 1.0) * 1000))
    if args.action == "add-controller":
        body = {
            "node_id": args.node_id,
            "directory_id": args.directory_id,
            "url": args.url,
            "timeout_ms": timeout_ms,
        }
        res = await _leader_call(client, "POST", "/v1/quorum/voters", body)
        verb = "Added"
    else:
        path = (
            f"/v1/quorum/voters/{args.node_id}?directory_id={args.directory_id}"
            f"&timeout_ms={timeout_ms}"
        )
        res = await _leader_call(client, "DELETE", path)
        verb = "Removed"
    voters = ", ".join(f"{v['node_id']}:{v['directory_id']}" for v in res.get("voters", []))
    print(
        f"{verb} controller {args.node_id} (directory {args.directory_id}); the change "
        f"committed at offset {res.get('offset')}. Voters: {voters}"
    )
    return 0


def _id_list(rows: list[Any]) -> str:
    """Node ids as kafka-metadata-quorum prints them: ``[1,2,3]``."""
    ids = sorted(r["node_id"] if isinstance(r, dict) else r for r in rows)
    return "[" + ",".join(str(i) for i in ids) + "]"


async def _quorum(client: AdminClient, args: argparse.Namespace) -> int:
    if args.action in ("add-controller", "remove-controller"):
        return await _voter_change(client, args)
    view = await client.quorum(leader=False)
    problem = None  # why the view printed is not the leader's (then exit 1)
    if view.get("state") != "leader" and view.get("leader_url"):
        # the leader has every replica's log end offset and fetch times
        try:
            view = await client.call_once(view["leader_url"].rstrip("/"), "GET", "/v1/quorum")
        except ClientError as e:
            # in an outage this is the command run first: show what a live node knows
            problem = (
                f"the leader this node knows (node {view.get('leader_id')}, epoch "
                f"{view.get('leader_epoch')}) did not answer: {e}. Below is node "
                f"{view.get('node_id')}'s own view (state {view.get('state')})"
            )
    if problem is None and view.get("state") != "leader":
        problem = (
            f"node {view.get('node_id')} knows no leader (state {view.get('state')}, epoch "
            f"{view.get('leader_epoch')}). Below is its own view"
        )
    if problem is not None:
        print(f"kraft quorum: {problem}; exit code 1", file=sys.stderr)
    code = 0 if problem is None else 1
    if args.json:
        print(json.dumps(view, indent=2, sort_keys=True))
        return code
    voters = view.get("voters", [])
    observers = view.get("observers", [])
    if args.replication:
        print(
            f"{'NodeId':<8}{'DirectoryId':<24}{'LogEndOffset':<14}{'Lag':<8}{'LastFetchTimestamp':<22}{'LastCaughtUpTimestamp':<24}Status"
        )
        leader_id = view.get("leader_id")
        for kind, rows in (("Follower", voters), ("Observer", observers)):
            # The leader first, then by node id, as kafka-metadata-quorum lists them.
            for r in sorted(rows, key=lambda r: (r["node_id"] != leader_id, r["node_id"])):
                status = "Leader" if r["node_id"] == view.get("leader_id") else kind
                print(
                    f"{r['node_id']:<8}{r.get('directory_id') or '-':<24}"
                    f"{r.get('log_end_offset', -1):<14}{r.get('lag', '-')!s:<8}"
                    f"{_ago(r.get('last_fetch_timestamp')):<22}{_ago(r.get('last_caught_up_timestamp')):<24}{status}"
                )
        return code
    lags = [r.get("lag", 0) or 0 for r in voters if r["node_id"] != view.get("leader_id")]
    now = int(time.time() * 1000)  # timestamp: DescribeQuorum's times are wall clock
    lag_times = [
        now - r["last_caught_up_timestamp"]
        for r in voters
        if r["node_id"] != view.get("leader_id") and (r.get("last_caught_up_timestamp") or -1) >= 0
    ]
    print(f"ClusterId:              {view.get('cluster_id')}")
    print(f"LeaderId:               {view.get('leader_id')}")
    print(f"LeaderEpoch:            {view.get('leader_epoch')}")
    print(f"HighWatermark:          {view.get('high_watermark')}")
    print(f"MaxFollowerLag:         {max(lags) if lags else 0}")
    print(f"MaxFollowerLagTimeMs:   {max(lag_times) if lag_times else 0}")
    print(f"CurrentVoters:          {_id_list(voters)}")
    print(f"CurrentObservers:       {_id_list(observers)}")
    return code


HANDLERS: dict[str, Callable[[AdminClient, argparse.Namespace], Awaitable[int]]] = {
    "topics": _topics,
    "brokers": _brokers,
    "elect": _elect,
    "quorum": _quorum,
}


def run(args: argparse.Namespace) -> int:
    return run_with_client(f"kraft {args.command}", args, HANDLERS[args.command])


def run_with_client(
    name: str,
    args: argparse.Namespace,
    action: Callable[[AdminClient, argparse.Namespace], Awaitable[int]],
    usage_errors: tuple[type[Exception], ...] = (ValueError,),
) -> int:
    """Run one admin `action` against `--bootstrap` (with `--command-config`'s
    security): exit 1 on a controller's error, 2 on a usage error, each printed as
    one line prefixed by `name` (Kafka's tools print `Error: ...` likewise)."""
    try:
        security = from_command_config(getattr(args, "command_config", None))
    except ConfigError as e:
        print(f"{name}: error: {e}", file=sys.stderr)
        return 2

    try:  # a --bootstrap that is no URL is a usage error for every command
        client = AdminClient(args.bootstrap, timeout_s=args.timeout, security=security)
    except ValueError as e:
        print(f"{name}: error: {e}", file=sys.stderr)
        return 2

    async def go() -> int:
        async with client:
            return await action(client, args)

    try:
        return asyncio.run(go())
    except ClientError as e:
        print(f"{name}: {e.code}: {e.message}", file=sys.stderr)
        return 1
    except usage_errors as e:
        print(f"{name}: error: {e}", file=sys.stderr)
        return 2
