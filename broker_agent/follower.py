"""The broker's metadata follower: a Raft observer of `__cluster_metadata`.

Brokers follow the metadata log as Kafka's do: as Raft **observers** (a node id
not in the voter set) running the same Raft client as the controllers
(kraft.raft_shell.driver.RaftClient over the pure RaftCore, kraft.raft_shell.transport's
`POST /raft/<endpoint>`), with the same Fetch / FetchSnapshot RPCs, so they never
count toward the high watermark. The broker's copy of the log is in memory
(`ObserverLog`, a MemoryLog with the flush hooks the client drives): a broker
keeps only the image, and the applied prefix of the log is dropped.

Two layers:

- `MetadataApplier` (pure): committed batches -> `MetadataImage` (metadata_log's
  replay), a fetched snapshot -> a fresh image (when the observer was behind the
  leader's log start), and an index of partitions by leader and by replica.
- `MetadataFollower` (asyncio shell): learns the voters and the cluster id from
  `GET /v1/quorum` (bounded retries with backoff and jitter), then runs the
  RaftClient as an observer with the applier as its listener.

`committed_offset` is what heartbeats report as `current_metadata_offset`: the
image's offset, except inside an open metadata transaction, whose records apply only
at its end: then the offset before its BeginTransactionRecord (what a Kafka broker
has published). A broker that reports an offset has every change up to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from kraft.clock import mono_ms
from kraft.raft.config import RaftConfig
from kraft.raft.memory_log import MemoryLog
from kraft.raft.state import ElectionState, LeaderAndEpoch
from kraft.raft_shell.driver import CommittedBatch, RaftClient
from kraft.raft_shell.transport import HttpTransport
from kraft.security.client_security import NONE, ClientSecurity
from metadata_log.batch import decode_records, iter_headers
from metadata_log.errors import MetadataLogError
from metadata_log.image import MetadataImage, PartitionRegistration
from metadata_log.records import BeginTransactionRecord, Record, SnapshotFooter, SnapshotHeader
from metadata_log.snapshot import SnapshotId

log = logging.getLogger("broker_agent.follower")

# A broker started with its controllers waits quietly for them at first; after
# this long without a quorum it says why, then again at most every
# DISCOVERY_WARN_EVERY_MS (a wrong port, scheme, credential or cluster id
# otherwise leaves it STARTING with nothing in its log).
DISCOVERY_WARN_AFTER_MS = 10_000
DISCOVERY_WARN_EVERY_MS = 30_000


async def wait_event(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait for `event` at most `timeout_s`; True if it is set (cancellation-safe,
    unlike asyncio.wait_for on Python 3.11)."""
    try:
        async with asyncio.timeout(max(0.0, timeout_s)):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def _first_of(
    event: asyncio.Event, future: asyncio.Future[Any] | None, timeout_s: float
) -> None:
    """Wait until `event` is set, `future` is done or `timeout_s` passed."""
    if future is None:
        await wait_event(event, timeout_s)
        return
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter, future}, timeout=timeout_s)
    finally:
        waiter.cancel()


PartitionKey = tuple[str, int]  # (topic_id, partition_id)


# ============================================================== pure: applier


class LeaderIndex:
    """Partitions by leader and by replica, kept current by the image's listener."""

    def __init__(self) -> None:
        self.led_by: dict[int, set[PartitionKey]] = {}
        self.replica_of: dict[int, set[PartitionKey]] = {}

    def partition_changed(
        self,
        topic_id: str,
        partition_id: int,
        old: PartitionRegistration | None,
        new: PartitionRegistration | None,
    ) -> None:
        key = (topic_id, partition_id)
        if old is not None:
            if old.leader >= 0:
                self.led_by.get(old.leader, set()).discard(key)
            for r in old.replicas:
                self.replica_of.get(r, set()).discard(key)
        if new is not None:
            if new.leader >= 0:
                self.led_by.setdefault(new.leader, set()).add(key)
            for r in new.replicas:
                self.replica_of.setdefault(r, set()).add(key)

    def rebuild(self, image: MetadataImage) -> None:
        self.led_by.clear()
        self.replica_of.clear()
        for t in image.topics.values():
            for pid, p in t.partitions.items():
                self.partition_changed(t.topic_id, pid, None, p)

    def leads(self, broker_id: int) -> frozenset[PartitionKey]:
        return frozenset(self.led_by.get(broker_id, ()))


def snapshot_records(data: bytes, where: str) -> tuple[list[Record], int]:
    """The data records of a snapshot (header batch, data batches, footer batch)
    and its last_contained_log_time. MetadataLogError if it is malformed."""
    records: list[Record] = []
    header: SnapshotHeader | None = None
    footer = False
    for pos, h in iter_headers(data, where, first_offset=0):
        recs = decode_records(data, pos, h, where)
        if footer:
            raise MetadataLogError(f"{where}: data after the snapshot footer at {h.base_offset}")
        if h.control:
            for r in recs:
                if isinstance(r, SnapshotHeader):
                    header = r
                elif isinstance(r, SnapshotFooter):
                    footer = True
        elif header is None:
            raise MetadataLogError(f"{where}: snapshot data before its header")
        else:
            records.extend(recs)
    if header is None or not footer:
        raise MetadataLogError(
            f"{where}: snapshot without {'header' if header is None else 'footer'}"
        )
    return records, header.last_contained_log_time


class MetadataApplier:
    """Committed batches and snapshots -> MetadataImage. Pure (no I/O, no clock).

    `apply_batch` replays a committed batch (control records only move the
    offset, as everywhere: the image's offset is a log offset); `load_snapshot`
    replaces the image with a snapshot's. The LeaderIndex follows every change.
    """

    def __init__(self) -> None:
        self.image = MetadataImage()
        self.index = LeaderIndex()
        self.image.listener = self.index
        self.snapshots_loaded = 0
        self.records_applied = 0
        # Invariant: the last offset at which no metadata transaction was open
        # (the image's offset whenever none is open now).
        self._published = -1

    @property
    def committed_offset(self) -> int:
        """The last offset whose changes are all in the image (-1 when empty): inside
        an open transaction, the offset before its BeginTransactionRecord."""
        return self._published

    def load_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        records, log_time = snapshot_records(data, f"<snapshot {snapshot_id.file_name}>")
        image = MetadataImage.from_records(records, snapshot_id.end_offset, log_time)
        image.listener = self.index
        self.index.rebuild(image)
        self.image = image
        self._published = image.offset
        self.snapshots_loaded += 1

    def apply_batch(self, base_offset: int, records: Iterable[Record], append_time_ms: int) -> None:
        """Replay one committed batch (offsets already in the image are skipped)."""
        off = base_offset
        image = self.image
        begun = -1  # offset of this batch's last BeginTransactionRecord
        for rec in records:
            if off > image.offset:
                image.replay(rec, off)
                self.records_applied += 1
                if type(rec) is BeginTransactionRecord:
                    begun = off
            off += 1
        image.last_append_time_ms = max(image.last_append_time_ms, append_time_ms)
        if not image.in_transaction:
            self._published = image.offset
        elif begun >= 0:
            self._published = begun - 1


class ObserverLog(MemoryLog):
    """The observer's log, in memory, with the flush hooks RaftClient drives.

    There is nothing to fsync (the broker's copy is a cache: after a restart it
    fetches again), so a flush completes at once. Batches below `trim_below` (what
    the applier has consumed) are dropped once more than `retain_offsets` offsets
    are held, so a long-running broker does not keep the whole log.
    """

    def __init__(self, retain_offsets: int = 4096) -> None:
        super().__init__()
        self.retain_offsets = retain_offsets
        self.trim_below = 0

    def prepare_flush(self) -> _MemoryFlush | None:
        if self.end_offset - self.start_offset > self.retain_offsets:
            upto = min(self.trim_below, self.end_offset)
            if upto > self.start_offset:
                self.delete_segments_below(upto)
        if self.end_offset <= self.flushed_offset:
            return None
        return _MemoryFlush()

    def complete_flush(self, job: _MemoryFlush) -> int:
        self.flush()
        return self.flushed_offset

    def snapshot_file(self, snapshot_id: SnapshotId) -> Path:
        """A name only: the snapshot's bytes are in memory (`snapshot_data`)."""
        return Path("memory:") / snapshot_id.file_name


class _MemoryFlush:
    """A flush job with nothing to do (RaftClient runs it in its worker thread)."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = False

    def run(self) -> None:
        self.done = True


class _NoQuorumState:
    """An observer's election state needs no file: it never votes, and after a
    restart it learns the leader from its first fetch."""

    def __init__(self) -> None:
        self.state = ElectionState()

    def read(self) -> ElectionState:
        return self.state

    def write(self, state: ElectionState) -> None:
        self.state = state


# ============================================================== asyncio shell


@dataclass(frozen=True, slots=True)
class QuorumInfo:
    cluster_id: str
    voters: tuple[int, ...]
    urls: dict[int, str]  # voter id -> controller URL (those that answered)


@dataclass(frozen=True)
class Discovery:
    """One round of `GET /v1/quorum`: the quorum, if a controller of the expected
    cluster answered with its voters, and why each URL that did not count did not."""

    info: QuorumInfo | None
    problems: dict[str, str]  # controller URL -> why its answer did not count


async def discover_quorum(
    session: aiohttp.ClientSession,
    controllers: Iterable[str],
    timeout_s: float,
    cluster_id: str | None = None,
    security: ClientSecurity = NONE,
) -> Discovery:
    """Ask every controller for `GET /v1/quorum` (in parallel, each with a timeout)."""
    urls = [u.rstrip("/") for u in controllers]

    async def one(url: str) -> tuple[dict[str, Any] | None, str | None]:
        try:
            async with session.get(
                url + "/v1/quorum",
                headers={"Accept": "application/json", **security.headers},
                timeout=aiohttp.ClientTimeout(total=timeout_s),
                ssl=security.ssl,
            ) as resp:
                text = await resp.text()
                if resp.status != 200:
                    return None, f"HTTP {resp.status}: {_error_text(text)}"
                body = json.loads(text)
                if not isinstance(body, dict):
                    return None, "its answer is not a quorum view"
                return body, None
        except TimeoutError:
            return None, f"no answer within {timeout_s:g} s"
        except (aiohttp.ClientSSLError, aiohttp.ClientConnectorCertificateError) as e:
            # before ValueError: a certificate error is one too (ssl.CertificateError)
            return None, (
                f"{type(e).__name__}: {e} (TLS: check ssl.truststore.location, "
                "ssl.keystore.location and the certificate's names)"
            )
        except (aiohttp.ClientError, OSError) as e:
            hint = ""
            if url.startswith("http://") and isinstance(e, aiohttp.ServerDisconnectedError):
                hint = " (is it a TLS listener? use https://)"
            return None, f"{type(e).__name__}: {e}{hint}"
        except ValueError:  # json.JSONDecodeError, or a body that is not text
            return None, "its answer is not JSON"

    answers = await asyncio.gather(*(one(u) for u in urls))
    problems: dict[str, str] = {}
    ids: dict[int, str] = {}
    voters: set[int] = set()
    found_cluster = cluster_id
    if found_cluster is None:
        # Not given: the cluster most of the answers name (the first named at a
        # tie). Merging another cluster's voters in (a wrong URL in the list) led to
        # a registration refused INCONSISTENT_CLUSTER_ID and the agent's exit.
        named = [b.get("cluster_id") for b, _ in answers if b is not None]
        named = [c for c in named if isinstance(c, str) and c]
        found_cluster = max(named, key=named.count) if named else None
    for url, (body, problem) in zip(urls, answers, strict=True):
        if body is None:
            problems[url] = problem or "no answer"
            continue
        cid = body.get("cluster_id")
        if cid != found_cluster:
            given = "(--cluster-id)" if cluster_id is not None else "(most controllers' answer)"
            problems[url] = f"it belongs to cluster {cid!r}, not {found_cluster!r} {given}"
            continue
        if type(body.get("node_id")) is int:
            ids[body["node_id"]] = url
        for v in body.get("voters") or []:
            if isinstance(v, dict) and type(v.get("node_id")) is int:
                voters.add(v["node_id"])
    if found_cluster is None or not voters:
        for url in urls:
            problems.setdefault(url, "its quorum view names no voter or cluster id")
        return Discovery(None, problems)
    return Discovery(QuorumInfo(found_cluster, tuple(sorted(voters)), ids), problems)


def _error_text(text: str) -> str:
    """A controller's error body (``{error_code, message}``) as one short line."""
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict) and "error_code" in body:
        return f"{body['error_code']}: {body.get('message', '')}"[:200]
    return text.strip()[:200] or "(empty body)"


class LeaderWatch:
    """After discovery: `quorum_unreachable` (a warning, after
    DISCOVERY_WARN_AFTER_MS without a known leader, then every
    DISCOVERY_WARN_EVERY_MS) while the observer knows no active controller (every
    controller down, or the quorum without a leader), and `quorum_reachable` once it
    knows one again. Time is an argument."""

    def __init__(self) -> None:
        self.since_ms: int | None = None  # when the leader was lost; None: known
        self.warn_at = 0
        self.warned = False

    def check(self, leader_id: int | None, now_ms: int) -> None:
        if leader_id is not None and leader_id >= 0:
            if self.warned:
                log.info(
                    "the metadata quorum has an active controller again",
                    extra={"event": "quorum_reachable", "leader_id": leader_id},
                )
            self.since_ms, self.warned = None, False
            return
        if self.since_ms is None:
            self.since_ms, self.warn_at = now_ms, now_ms + DISCOVERY_WARN_AFTER_MS
        if now_ms >= self.warn_at:
            self.warn_at = now_ms + DISCOVERY_WARN_EVERY_MS
            self.warned = True
            log.warning(
                "no active controller of the metadata quorum answers; still trying",
                extra={
                    "event": "quorum_unreachable",
                    "waited_s": (now_ms - self.since_ms) // 1000,
                    "problems": "the observer knows no leader: every controller down, "
                    "or the quorum without a leader",
                },
            )


class MetadataFollower:
    """Discovers the quorum, then runs a RaftClient observer that feeds the applier."""

    def __init__(
        self,
        node_id: int,
        controllers: list[str],
        session: aiohttp.ClientSession,
        *,
        cluster_id: str | None = None,
        raft_config: RaftConfig | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], int] = mono_ms,
        discovery_timeout_s: float = 2.0,
        max_discovery_backoff_s: float = 5.0,
        retain_offsets: int = 4096,
        security: ClientSecurity = NONE,
        alternates: Sequence[tuple[int, ClientSecurity]] = (),
    ) -> None:
        self.node_id = node_id
        self.security = security  # fetches as an observer with broker node_id's credential
        # A fleet's other ids (and their credentials): the observer takes the first
        # that is no voter's, should node_id be one (see `_observer_id`).
        self.alternates = list(alternates)
        self.controllers = [c.rstrip("/") for c in controllers]
        self.session = session  # for discovery; the Raft transport has its own pool
        self.cluster_id = cluster_id
        self.config = raft_config or RaftConfig()
        self.rng = rng or random.Random()
        self.clock = clock
        self.discovery_timeout_s = discovery_timeout_s
        self.max_discovery_backoff_s = max_discovery_backoff_s
        self.applier = MetadataApplier()
        self.log = ObserverLog(retain_offsets)
        self.client: RaftClient | None = None
        self.transport: HttpTransport | None = None
        self.quorum: QuorumInfo | None = None
        self._listeners: list[Callable[[int], None]] = []
        self._notify_scheduled = False
        self._ready_event = asyncio.Event()
        self._stop_event = asyncio.Event()
        self._stopped = False
        self._discovering_since_ms: int | None = None  # clock() when discovery began
        # Why the follower ended on its own (the Raft observer failed), else None.
        self.failure: str | None = None

    # ------------------------------------------------------------- reading

    @property
    def committed_offset(self) -> int:
        return self.applier.committed_offset

    @property
    def image(self) -> MetadataImage:
        return self.applier.image

    @property
    def index(self) -> LeaderIndex:
        return self.applier.index

    @property
    def high_watermark(self) -> int:
        return 0 if self.client is None else self.client.high_watermark

    @property
    def caught_up(self) -> bool:
        """Everything the leader said is committed is in the image."""
        hw = self.high_watermark
        return hw > 0 and self.committed_offset >= hw - 1

    def led_by(self, broker_id: int) -> frozenset[PartitionKey]:
        return self.applier.index.leads(broker_id)

    def leads_any(self, broker_id: int) -> bool:
        """Whether `broker_id` leads a partition (no copy: called per agent per batch)."""
        return bool(self.applier.index.led_by.get(broker_id))

    def subscribe(self, fn: Callable[[int], None]) -> None:
        """`fn(committed_offset)` after the image changed (once per driver cycle)."""
        self._listeners.append(fn)

    async def wait_cluster_id(self, timeout_s: float) -> str | None:
        """The cluster id once the quorum is discovered (None after `timeout_s`)."""
        await wait_event(self._ready_event, timeout_s)
        return None if self.quorum is None else self.quorum.cluster_id

    def status(self) -> dict[str, Any]:
        core = None if self.client is None else self.client.core
        return {
            "node_id": self.node_id,
            "committed_offset": self.committed_offset,
            "high_watermark": self.high_watermark,
            "caught_up": self.caught_up,
            "leader_id": None if core is None else core.leader_id,
            "leader_epoch": None if core is None else core.epoch,
            "log_start_offset": self.log.start_offset,
            "log_end_offset": self.log.end_offset,
            "snapshots_loaded": self.applier.snapshots_loaded,
        }

    # ------------------------------------------------------------- listener
    # (RaftClient calls these from its driver task)

    def handle_load_snapshot(self, snapshot_id: SnapshotId, path: Path) -> None:
        self.applier.load_snapshot(snapshot_id, self.log.snapshot_data(snapshot_id))
        self.log.trim_below = snapshot_id.end_offset
        log.info(
            "metadata snapshot loaded",
            extra={
                "event": "snapshot_loaded",
                "end_offset": snapshot_id.end_offset,
                "epoch": snapshot_id.epoch,
            },
        )
        self._changed()

    def handle_commit(self, batch: CommittedBatch) -> None:
        self.applier.apply_batch(batch.base_offset, batch.records, batch.append_time_ms)
        self.log.trim_below = batch.last_offset + 1
        self._changed()

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        pass

    def _changed(self) -> None:
        if not self._notify_scheduled:
            self._notify_scheduled = True
            asyncio.get_running_loop().call_soon(self._notify)

    def _notify(self) -> None:
        self._notify_scheduled = False
        offset = self.committed_offset
        for fn in list(self._listeners):
            fn(offset)

    # ------------------------------------------------------------- running

    async def run(self) -> None:
        """Discover the quorum, then follow until stop(); stops the client on exit."""
        try:
            await self._discover()
            if self._stopped or self.quorum is None:
                return
            q = self.quorum
            if not self._observer_id(q.voters):
                return
            self.transport = HttpTransport(dict(q.urls), security=self.security)
            self.client = RaftClient(
                self.node_id,
                {v: q.urls.get(v, "") for v in q.voters},
                q.cluster_id,
                self.log,  # type: ignore[arg-type]  # duck-typed: MemoryLog + flush hooks
                _NoQuorumState(),  # type: ignore[arg-type]
                self.config,
                transport=self.transport,
                rng=self.rng,
            )
            self.client.register_listener(self)
            await self.client.start()
            self._ready_event.set()
            watch = LeaderWatch()
            failed = self.client.failed
            while not self._stopped:
                # A controller that was down at start: learn its URL later (bounded).
                if len(q.urls) < len(q.voters):
                    await self._rediscover()
                watch.check(self.client.leader_and_epoch.leader_id, self.clock())
                if failed is not None and failed.done():
                    # The observer stopped (a record it cannot replay, a snapshot it
                    # cannot load): the image is frozen. Say so and end, so that the
                    # brokers stop instead of reporting a stale offset forever.
                    self.failure = f"the metadata log observer failed: {failed.result()}"
                    log.error(
                        "metadata follower stopped: %s",
                        self.failure,
                        extra={"event": "metadata_follower_failed", "error": self.failure},
                    )
                    return
                await _first_of(self._stop_event, failed, 5.0)
        finally:
            self._ready_event.set()
            if self.client is not None:
                with contextlib.suppress(Exception):
                    await self.client.shutdown(timeout_s=1.0)

    def _observer_id(self, voters: tuple[int, ...]) -> bool:
        """Make sure the observer's replica id is no voter's: a RaftClient whose id is
        in the voter set runs as a voter (unattached, prospective: pre-votes to the
        quorum). Node ids are one namespace, so such a broker is refused anyway; a
        fleet's observer moves to its next id. False: none is left (logged)."""
        if self.node_id not in voters:
            return True
        for node_id, security in self.alternates:
            if node_id not in voters:
                log.warning(
                    "broker id %s is a controller's: the metadata observer fetches as %s",
                    self.node_id,
                    node_id,
                    extra={"event": "observer_id_moved", "node_id": node_id},
                )
                self.node_id, self.security = node_id, security
                return True
        log.error(
            "broker id %s is a controller's (voters %s): node ids are one namespace; "
            "the metadata observer does not start",
            self.node_id,
            list(voters),
            extra={"event": "observer_not_started", "node_id": self.node_id},
        )
        return False

    @property
    def stopped(self) -> bool:
        """stop() was called (an end of `run` without it is a failure)."""
        return self._stopped

    def stop(self) -> None:
        self._stopped = True
        self._stop_event.set()
        self._ready_event.set()

    async def _discover(self) -> None:
        backoff = 0.1
        self._discovering_since_ms = started = self.clock()
        warn_at = started + DISCOVERY_WARN_AFTER_MS
        while not self._stopped:
            found = await discover_quorum(
                self.session,
                self.controllers,
                self.discovery_timeout_s,
                self.cluster_id,
                self.security,
            )
            info = found.info
            if info is not None:
                self.quorum = info
                self.cluster_id = info.cluster_id
                self._discovering_since_ms = None
                log.info(
                    "metadata quorum discovered",
                    extra={
                        "event": "quorum_discovered",
                        "cluster_id": info.cluster_id,
                        "voters": list(info.voters),
                        "known": sorted(info.urls),
                    },
                )
                return
            now = self.clock()
            if now >= warn_at:
                warn_at = now + DISCOVERY_WARN_EVERY_MS
                log.warning(
                    "no controller of the metadata quorum answered; still trying",
                    extra={
                        "event": "quorum_unreachable",
                        "waited_s": (now - started) // 1000,
                        "problems": "; ".join(f"{u}: {why}" for u, why in found.problems.items()),
                    },
                )
            delay = min(self.max_discovery_backoff_s, backoff) * self.rng.uniform(0.8, 1.2)
            backoff *= 2
            await wait_event(self._stop_event, delay)

    @property
    def discovering_ms(self) -> int | None:
        """How long discovery has gone on without a quorum (None: not discovering)."""
        since = self._discovering_since_ms
        return None if since is None else self.clock() - since

    async def _rediscover(self) -> None:
        info = (
            await discover_quorum(
                self.session,
                self.controllers,
                self.discovery_timeout_s,
                self.cluster_id,
                self.security,
            )
        ).info
        if info is None or self.quorum is None:
            return
        for vid, url in info.urls.items():
            if vid not in self.quorum.urls:
                self.quorum.urls[vid] = url
                if self.transport is not None:
                    self.transport.peers[vid] = url
                if self.client is not None:
                    self.client.voter_urls[vid] = url
