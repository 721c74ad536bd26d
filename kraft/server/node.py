"""ControllerNode: one `kraft controller` process, composed from the pieces.

    aiohttp app ── /raft/*  ──────────────► RaftClient ── RaftCore (pure)
               └─ /v1/*, /metrics ─► ControllerService ── QuorumController (pure)
                                          │  (event queue)         ▲
                                          ▼                        │ replay
                                    _RaftWriter ── append ──► RaftClient
                                                                   │ listener
    ControllerNode (RaftListener) ◄── committed batches, snapshots, leader changes

ControllerService is the routes' backend itself (kraft.server.routes
.ControllerBackend; the heartbeat front uses it too); _RaftWriter is its
MetadataWriter and QuorumReader. Metrics and state-change lines come from the
controller's replay observer (kraft.server.replay_metrics); every setting is
read through NodeSettings.get, whose defaults are the registry's (kraft.config).

- The active controller replays its records as it appends them (ControllerService)
  and, when they commit, only answers the waiting replies; a standby replays the
  committed batches with the same QuorumController.replay (hot standby).
- Leadership: the RaftClient announces this node as leader only after every
  batch before the epoch's first offset has been handed over, so activation
  starts from the whole committed log; losing leadership reverts the uncommitted
  replays (QuorumController.deactivate) and fails pending replies NOT_CONTROLLER.
- Snapshots: every `metadata.log.max.record.bytes.between.snapshots` bytes of
  committed batches (or `metadata.log.max.snapshot.interval.ms`), on any node,
  once nothing uncommitted is replayed, no metadata transaction is open and the
  state is durable in the local log. A forked child writes the image as of the
  fork (kraft.server.forked_snapshot: nothing copied on the loop, no GIL shared;
  the simulator copies it and writes in a thread); then retention (Kafka's
  maybeClean: FileReplicatedLog.clean_retention) deletes the oldest snapshots and
  the segments below the next one while over `metadata.max.retention.bytes` or
  `.ms`, never the newest snapshot. A restarted node loads its newest snapshot and
  replays the committed rest.

Data directory (DESIGN 1.5): meta.properties (cluster.id, node.id), quorum-state,
__cluster_metadata-0/ (segments, checkpoints, snapshots). The first start formats
it; later starts check that the node id and an explicit cluster id agree.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import hashlib
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kraft.clock import mono_ms, wall_ms
from kraft.config import Config, ConfigError, parse_properties, value_of
from kraft.controller.batching import EncodedBatch
from kraft.controller.quorum_controller import ControllerConfig, QuorumController
from kraft.controller.topic_policy import TopicLimits
from kraft.raft.config import RaftConfig
from kraft.raft.state import LeaderAndEpoch
from kraft.raft_shell.dir_lock import DataDirInUse, hold_dir_lock
from kraft.raft_shell.driver import CommittedBatch, RaftClient
from kraft.raft_shell.file_log_adapter import FileReplicatedLog
from kraft.raft_shell.quorum_state import QuorumStateError, QuorumStateFile
from kraft.raft_shell.transport import HttpTransport
from kraft.server.chunked_replay import GC_PAUSE, REPLAY_CHUNK, ChunkedReplay
from kraft.server.controller_service import ControllerService
from kraft.server.forked_snapshot import can_fork, fork_writer, wait_child
from kraft.server.heartbeat_front import HeartbeatFronts
from kraft.server.http_codec import error_middleware, same_origin_middleware
from kraft.server.limits import ConnectionQuotaConfig, GuardedSite, body_middleware
from kraft.server.metrics import ControllerMetrics, image_gauges
from kraft.server.quorum_routes import build_quorum_routes
from kraft.server.raft_routes import build_raft_routes
from kraft.server.replay_metrics import ReplayMetrics
from kraft.server.routes import build_routes
from metadata_log.checkpoints import fsync_dir
from metadata_log.image import MetadataImage
from metadata_log.records import (
    VotersRecord,
)
from metadata_log.replay import METADATA_DIR_NAME, read_snapshot_image
from metadata_log.snapshot import SnapshotId, write_snapshot

if TYPE_CHECKING:
    from kraft.security.client_security import ClientSecurity

log = logging.getLogger("kraft.node")

META_PROPERTIES = "meta.properties"
RAFT_STATE_CODES = {
    "unattached": 0,
    "follower": 1,
    "candidate": 2,
    "leader": 3,
    "resigned": 4,
    "prospective": 5,
    "observer": 6,
}


class FormatError(Exception):
    """The data directory belongs to another node or cluster, or is damaged."""


# ---------------------------------------------------------------------- format


def process_start_ms() -> int | None:
    """When this process started, on the monotonic clock (`kraft.clock.mono_ms`, so
    that the Raft timers that count from it never step; 10 ms resolution); None if
    unknown.

    Read from /proc (Linux): the process's start in clock ticks since boot and
    the system uptime give its age.
    """
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start_s = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
        with open("/proc/uptime") as f:
            uptime_s = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    age_ms = max(0, int((uptime_s - start_s) * 1000))
    return mono_ms() - age_ms


def derive_cluster_id(voters: dict[int, tuple[str, int]]) -> str:
    """A Kafka-shaped cluster id (22 base64url chars of 16 bytes) from the voter set.

    Canonical form: voters sorted by id, ``id@host:port`` joined by commas, so
    every node started with the same voters agrees without a format step.
    """
    canon = ",".join(f"{i}@{h}:{p}" for i, (h, p) in sorted(voters.items()))
    digest = hashlib.sha256(canon.encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def new_directory_id() -> str:
    """A random directory id in Kafka's printed Uuid form (22 base64url characters).

    Never one starting with "-" (as Kafka's Uuid.randomUuid), which a command line
    would take for an option (`--directory-id -x...`)."""
    while True:
        d = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        if not d.startswith("-"):
            return d


def _write_meta(path: Path, cluster_id: str, node_id: int, directory_id: str) -> None:
    text = (
        "#\n"
        f"#{time.strftime('%a %b %d %H:%M:%S UTC %Y', time.gmtime())}\n"
        f"cluster.id={cluster_id}\n"
        f"node.id={node_id}\n"
        f"directory.id={directory_id}\n"
        "version=1\n"
    )
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    tmp.replace(path)
    fsync_dir(path.parent)


def read_meta(data_dir: Path) -> dict[str, str] | None:
    """meta.properties of a formatted data directory (None: not formatted)."""
    path = data_dir / META_PROPERTIES
    if not path.exists():
        return None
    try:
        return parse_properties(path.read_text(), str(path))
    except (OSError, UnicodeDecodeError, ConfigError) as e:
        raise FormatError(f"cannot read {path}: {e}") from None


def directory_id_of(data_dir: Path) -> str:
    """The data directory's directory id (KIP-853), written when it was formatted.

    A directory formatted before directory ids existed gets one now: it is the
    same disk, so the voter it holds keeps its identity from here on."""
    props = read_meta(data_dir)
    if props is None:
        raise FormatError(f"{data_dir} is not formatted")
    d = props.get("directory.id")
    if d:
        return d
    d = new_directory_id()
    _write_meta(data_dir / META_PROPERTIES, props["cluster.id"], int(props["node.id"]), d)
    log.info("added a directory id", extra={"event": "directory_id_added", "directory_id": d})
    return d


def format_or_check(
    data_dir: Path, node_id: int, cluster_id: str, explicit_cluster_id: bool
) -> str:
    """Write meta.properties on first start (with a new random directory id: a wiped
    disk is a new replica); otherwise check it. Returns the cluster id."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / META_PROPERTIES
    if not path.exists():
        _write_meta(path, cluster_id, node_id, new_directory_id())
        log.info(
            "formatted data directory",
            extra={"event": "formatted", "data_dir": str(data_dir), "cluster_id": cluster_id},
        )
        return cluster_id
    try:
        props = parse_properties(path.read_text(), str(path))
    except (OSError, UnicodeDecodeError, ConfigError) as e:
        raise FormatError(f"cannot read {path}: {e}") from None
    stored_cluster, stored_node = props.get("cluster.id"), props.get("node.id")
    if not stored_cluster or stored_node is None:
        raise FormatError(f"{path} lacks cluster.id or node.id")
    if stored_node != str(node_id):
        raise FormatError(
            f"{path} belongs to node {stored_node}, not node {node_id}: use another --data-dir"
        )
    if stored_cluster != cluster_id:
        if explicit_cluster_id:
            raise FormatError(
                f"{path} belongs to cluster {stored_cluster}, not --cluster-id {cluster_id}"
            )
        log.warning(
            "the data directory's cluster id differs from the one derived from the voters; "
            "keeping the directory's",
            extra={"event": "cluster_id_kept", "stored": stored_cluster, "derived": cluster_id},
        )
    return stored_cluster


# Young collections every 50,000 net container allocations instead of 700: at
# thousands of requests per second the default collected several hundred times a
# second and promoted every in-flight request's objects, which then filled the old
# generation and brought a full collection every second or so.
GC_THRESHOLDS = (50_000, 20, 100)


def tune_gc() -> None:
    gc.set_threshold(*GC_THRESHOLDS)
    freeze_heap()


def freeze_heap() -> None:
    """Move every object alive now out of the cyclic garbage collector's reach.

    A full collection walks every tracked object with the event loop stopped: at
    10,000 brokers it was ~60k objects (mostly the code itself) and came every few
    seconds under heartbeat load, at 2M partitions it would be millions. The image
    is acyclic (refcounting still frees what replay replaces), so the collector
    only has the young request objects left to walk. Called at start and when a
    snapshot is loaded or written, so the leak bound (cyclic garbage that was alive
    at a freeze) stays a few in-flight requests per snapshot."""
    gc.freeze()


# ---------------------------------------------------------------------- pieces


class _RaftWriter:
    """ControllerService's MetadataWriter and QuorumReader over the RaftClient."""

    def __init__(self, raft: RaftClient) -> None:
        self.raft = raft

    def next_offset(self) -> int:
        return self.raft.next_offset()

    def append(self, batches: list[EncodedBatch], now_ms: int) -> int:
        return self.raft.append(batches)  # NotLeaderError (kraft.raft.errors) passes through

    def committed_offset(self) -> int:
        return self.raft.delivered_offset - 1

    def leader_hint(self) -> tuple[int | None, str | None]:
        le = self.raft.leader_and_epoch
        return le.leader_id, self.raft.leader_url(le.leader_id)

    def describe(self) -> dict[str, Any]:
        return self.raft.describe()

    def read_committed(self, from_offset: int, max_bytes: int) -> tuple[bytes, int, int]:
        raft = self.raft
        data = raft.log.read(from_offset, max_bytes) if max_bytes > 0 else b""
        return data, raft.high_watermark, raft.log.start_offset


@dataclass
class NodeSettings:
    """Everything a controller node needs, from the CLI and its configuration."""

    node_id: int
    voters: dict[int, tuple[str, int]] | None  # None: --bootstrap-controllers
    data_dir: Path
    cluster_id: str | None = None  # None: derived from the voters
    listen: tuple[str, int] | None = None  # None: this node's voter address
    config: Config | None = None
    # KIP-853: start as an observer that finds the quorum through these URLs.
    bootstrap_controllers: tuple[str, ...] = ()

    def get(self, key: str) -> Any:
        """The configured value, else the registry's default (kraft.config)."""
        return value_of(self.config, key)


def _url(host: str, port: int, scheme: str = "http") -> str:
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


# ------------------------------------------------------------------------ node


class ControllerNode:
    """A controller quorum node: Raft + controller + HTTP, started and stopped as one."""

    def __init__(
        self,
        settings: NodeSettings,
        *,
        clock: Callable[[], int] = mono_ms,
        timestamp: Callable[[], int] = wall_ms,
        rng: random.Random | None = None,
        transport: Any = None,
        fork_snapshots: bool | None = None,
    ) -> None:
        """`clock`, `timestamp`, `rng` and `transport` are seams for the deterministic
        simulator (tests/dsim): by default the monotonic and wall clocks, fresh
        randomness and HTTP to the voters. `fork_snapshots`: snapshots are written
        by a forked child (kraft.server.forked_snapshot) rather than a thread over a
        copy of the image; by default where the platform can, unless `transport` is
        given (the simulator's disk and executor are in-process)."""
        self.settings = settings
        if fork_snapshots is None:
            fork_snapshots = transport is None and can_fork()
        self._fork_snapshots = fork_snapshots
        self._clock = clock
        self._timestamp = timestamp
        rng = rng or random.Random()
        s = settings
        self.node_id = s.node_id
        voters = s.voters or {}
        if s.listen is None and s.node_id not in voters:
            raise ConfigError(
                f"node {s.node_id} is not among the voters {sorted(voters)}: give --listen"
            )
        if not voters and not s.bootstrap_controllers:
            raise ConfigError("give --voters or --bootstrap-controllers")
        self.listen = s.listen or voters[s.node_id]
        # TLS, authentication and authorization (issue 8); all off by default.
        from kraft.security.server_security import ServerSecurity

        self.security = ServerSecurity.from_config(s.config)
        scheme = self.security.scheme
        self.voter_urls = {i: _url(h, p, scheme) for i, (h, p) in voters.items()}
        self.url = _url(*self.listen, scheme)
        self.data_dir = Path(s.data_dir)
        explicit = s.cluster_id is not None
        if s.cluster_id is None and not voters:
            raise ConfigError("--cluster-id is required with --bootstrap-controllers")
        self.cluster_id = format_or_check(
            self.data_dir, s.node_id, s.cluster_id or derive_cluster_id(voters), explicit
        )
        self.directory_id = directory_id_of(self.data_dir)
        self._open_raft(rng, transport, voters)
        self._build_controller(rng, voters)
        self.raft.register_listener(self)
        self.raft.on_state_change = self._on_raft_state
        self._active_from: int | None = None  # first offset this node wrote as active
        self._last_leader: tuple[int, int] | None = None
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = clock()  # the snapshot interval's timer
        self._snapshot_task: asyncio.Task[None] | None = None
        # Committed batches a standby has still to replay: a large change (a fence of
        # a broker in a million ISRs) is replayed REPLAY_CHUNK records per loop pass
        # by the same ChunkedReplay the active controller uses. Replayed at once it
        # stopped this node's fetches past the fetch timeout, and the followers, all
        # busy with the same change, elected a new leader.
        self._replayer = ChunkedReplay(self.controller, REPLAY_CHUNK)
        self._replay_task: asyncio.Task[None] | None = None
        # The epoch this node won but activates only once its backlog is replayed.
        self._activating: LeaderAndEpoch | None = None
        self.snapshots_written = 0
        self._runner: web.AppRunner | None = None
        self.heartbeat_fronts: HeartbeatFronts | None = None
        self._stopped = asyncio.Event()
        # Certificates, credentials and tokens rotate without a restart (issue 25).
        from kraft.security.reload import Reloader

        self.security_reloader = Reloader(
            [self.security], self.security.reload_interval_ms, who=f"controller-{s.node_id}"
        )

    def _open_raft(
        self, rng: random.Random, transport: Any, voters: dict[int, tuple[str, int]]
    ) -> None:
        """The metadata log (DESIGN 1.5) and the Raft driver over it."""
        s = self.settings
        self.raft_config = RaftConfig.from_config(s.config)
        self.snapshot_bytes = s.get("metadata.log.max.record.bytes.between.snapshots")
        self.snapshot_interval_ms = s.get("metadata.log.max.snapshot.interval.ms")
        self.retention_bytes = s.get("metadata.max.retention.bytes")
        self.retention_ms = s.get("metadata.max.retention.ms")
        self.log = FileReplicatedLog.open(
            self.data_dir / METADATA_DIR_NAME, segment_bytes=s.get("metadata.log.segment.bytes")
        )
        self.raft = RaftClient(
            s.node_id,
            self.voter_urls or None,
            self.cluster_id,
            self.log,
            QuorumStateFile(self.data_dir),
            self.raft_config,
            transport=transport or HttpTransport(self.voter_urls, security=self.security.client),
            rng=random.Random(rng.getrandbits(64)),
            clock=self._clock,
            timestamp=self._timestamp,
            directory_id=self.directory_id,
            bootstrap_servers=s.bootstrap_controllers,
        )

    def _build_controller(self, rng: random.Random, voters: dict[int, tuple[str, int]]) -> None:
        """The pure controller, its metrics (a replay observer) and its event-queue
        shell, which is also the HTTP routes' backend."""
        s = self.settings
        self.metrics = ControllerMetrics(self._gauges)
        config = ControllerConfig.from_config(
            s.config, s.node_id, frozenset(voters) | {s.node_id}, self.cluster_id
        )
        self.controller = QuorumController(
            config, random.Random(rng.getrandbits(64)), observer=ReplayMetrics(self.metrics)
        )
        self._voters_version = -1  # of the voter set last given to the controller
        raft_log = _RaftWriter(self.raft)
        self.service = ControllerService(
            self.controller,
            raft_log,
            queue_size=s.get("controller.event.queue.size"),
            request_timeout_ms=s.get("request.timeout.ms"),
            max_idle_interval_ms=s.get("metadata.max.idle.interval.ms"),
            quorum=raft_log,
            metrics=self.metrics,
            clock=self._clock,
            timestamp=self._timestamp,
        )

    # ----------------------------------------------------------------- lifecycle

    def build_app(self) -> web.Application:
        from kraft.security.server_security import SECURITY, security_middleware

        s = self.settings
        middlewares: list[Any] = [error_middleware, same_origin_middleware]
        if self.security.authorizer is not None:
            middlewares.append(security_middleware(self.security))
        middlewares.append(body_middleware(s.get("connections.max.idle.ms") / 1000))
        app = web.Application(
            middlewares=middlewares,
            client_max_size=s.get("max.request.bytes"),
        )
        app[SECURITY] = self.security
        app.add_routes(build_raft_routes(self.raft, s.get("replica.fetch.response.max.bytes")))
        app.add_routes(
            build_quorum_routes(
                self.raft, lambda: self.controller.image.brokers, self._probe_controller
            )
        )
        app.add_routes(build_routes(self.service, TopicLimits.from_config(s.config)))
        return app

    async def start(self) -> None:
        """Listen first (peers and clients get answers at once), then drive Raft."""
        idle_s = self.settings.get("connections.max.idle.ms") / 1000
        self._runner = web.AppRunner(
            self.build_app(), access_log=None, handle_signals=False, keepalive_timeout=idle_s
        )
        await self._runner.setup()
        host, port = self.listen
        fronts = None
        if self.settings.get("controller.heartbeat.front.enable"):
            assert self._runner.server is not None
            fronts = HeartbeatFronts(
                self.service,
                self._runner.server,
                max_body_bytes=self.settings.get("max.request.bytes"),
                idle_timeout_s=idle_s,
                security=self.security,
            )
        self.heartbeat_fronts = fronts
        site = GuardedSite(
            self._runner,
            host,
            port,
            ssl_context=self.security.ssl_context,
            quotas=ConnectionQuotaConfig.from_settings(self.settings),
            # the voters' hosts are protected (issue 25); the voter set may change (KIP-853)
            voter_urls=lambda: (
                [v.url for v in self.raft.core.voter_set]
                if self.raft.core is not None
                else list(self.voter_urls.values())
            ),
            metrics=self.metrics,
            fronts=fronts,
        )
        try:
            await site.start()
        except OSError as e:
            await self._runner.cleanup()
            raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
        self.service.start()
        self.security_reloader.start()
        self.metrics.watch_gc()
        await self.raft.start(process_start_ms())
        self._warn_of_moved_voters()
        log.info(
            "controller started",
            extra={
                "event": "controller_started",
                "node_id": self.node_id,
                "url": self.url,
                "cluster_id": self.cluster_id,
                "directory_id": self.directory_id,
                "voters": sorted(self.raft.core.voters) if self.raft.core else [],
            },
        )

    def _warn_of_moved_voters(self) -> None:
        """Once a VotersRecord is in the log (KIP-853) its URLs win over --voters, so a
        controller given another port or host for a voter keeps dialling the old
        one, and with its own URL changed nobody reaches it: say so at start."""
        core = self.raft.core
        if core is None:
            return
        for voter in core.voter_set.voters:
            given = self.voter_urls.get(voter.node_id)
            if given and voter.url and given != voter.url.rstrip("/"):
                log.warning(
                    "the metadata log's voter set gives controller %d another URL than "
                    "--voters; the log's is used: to move a controller, remove it and add "
                    "it again (kraft quorum remove-controller / add-controller)",
                    voter.node_id,
                    extra={
                        "event": "voter_url_differs",
                        "voter": voter.node_id,
                        "url_in_log": voter.url,
                        "url_given": given,
                    },
                )

    async def _probe_controller(self, url: str, timeout_s: float) -> dict[str, Any]:
        """Who answers at a new voter's URL (quorum_routes.check_voter_url), asked as
        this controller (its TLS material and token)."""
        return await get_quorum_view(url, self.security.client, timeout_s)

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Graceful: stop the controller, resign Raft leadership (EndQuorumEpoch), stop
        serving, close the log."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.metrics.unwatch_gc()
        await self.security_reloader.stop()
        if self._replay_task is not None:
            self._replay_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._replay_task
        await self.service.stop()
        await self.raft.shutdown(timeout_s)
        if self._snapshot_task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._snapshot_task), timeout_s)
        if self._snapshot_task is not None:  # still writing: a forked writer is killed
            self._snapshot_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._snapshot_task
        if self._runner is not None:
            await self._runner.cleanup()
        self.log.close(flush=self.raft.fatal_error is None)
        log.info("controller stopped", extra={"event": "controller_stopped"})

    @property
    def failed(self) -> asyncio.Future[BaseException] | None:
        return self.raft.failed

    # ------------------------------------------------------------ RaftListener

    def handle_load_snapshot(self, snapshot_id: SnapshotId, path: Path) -> None:
        t0 = time.perf_counter()
        image = read_snapshot_image(path, snapshot_id.end_offset)
        if self.controller.active:  # never: a leader does not install snapshots
            self.service.on_lost_leadership()
            self._active_from = None
        # the snapshot covers what was still waiting to be replayed
        self._replayer.drop_through(image.offset)
        self.controller.load_snapshot(image)
        freeze_heap()
        self._bytes_since_snapshot = 0
        log.info(
            "loaded snapshot",
            extra={
                "event": "snapshot_loaded",
                "snapshot": snapshot_id.file_name,
                "offset": image.offset,
                "ms": round((time.perf_counter() - t0) * 1000, 1),
            },
        )

    def handle_commit(self, batch: CommittedBatch) -> None:
        self._sync_controller_ids()
        if self._active_from is not None and batch.base_offset >= self._active_from:
            # Our own batch: already replayed when appended; now it is committed.
            self.service.on_committed(batch.last_offset)
        else:
            # decoded when its turn comes; a small batch with nothing queued before it
            # is replayed here in one step
            r = self._replayer
            n = batch.header.record_count
            r.add(batch.base_offset, lambda: batch.records, batch.append_time_ms, n)
            if self._replay_task is None and not r.step():
                self._replay_task = asyncio.get_running_loop().create_task(
                    self._replay_committed(), name="controller-replay"
                )
        self._keep_snapshots_off_large_changes()
        self._bytes_since_snapshot += batch.size_bytes
        self._maybe_snapshot()  # not while batches wait: the image is behind the commit

    def _keep_snapshots_off_large_changes(self) -> None:
        """Kill a forked snapshot writer while a change too large for one batch (a
        metadata transaction) is under way: generated or replayed on the active
        controller, staged or applied on a standby (issue 26). The snapshot is due
        again and taken once the change is over (no snapshot starts meanwhile: the
        image is then behind the commit or in a transaction). The writer competed
        with the change for the cores, and every page the change wrote was copied
        for it (docs/big-fence.md: at 2M partitions a fence began while the three
        controllers each wrote the snapshot the partitions' creation had made due).
        A writer thread (the simulator's) cannot be stopped."""
        task = self._snapshot_task
        if task is None or not self._fork_snapshots or task.done():
            return
        if not (self.service.in_large_transaction or self.controller.image.in_transaction):
            return
        task.cancel()  # the writer is killed and reaped as the task ends
        self._snapshot_task = None
        self._bytes_since_snapshot = max(self._bytes_since_snapshot, self.snapshot_bytes)
        log.info("snapshot abandoned", extra={"event": "snapshot_abandoned"})

    async def _replay_committed(self) -> None:
        GC_PAUSE.pause()
        try:
            await self._replayer.drain()  # fetches go on between slices
        finally:
            self._replay_task = None
            GC_PAUSE.resume()
        if self._activating is not None:
            leader, self._activating = self._activating, None
            self.handle_leader_change(leader)
        self._maybe_snapshot()

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self._activating = None
        self._sync_controller_ids()
        if leader.leader_id == self.node_id:
            if not self._replayer.idle:
                # Activation starts from the whole committed log, replayed in slices
                # first (replayed at once, a big backlog cost the new leader its
                # followers); meanwhile writes are refused NOT_CONTROLLER.
                self._activating = leader
                return
            self._active_from = self.raft.next_offset()
            self.service.on_became_leader()
        elif self._active_from is not None:
            self._active_from = None
            self.service.on_lost_leadership()

    def _sync_controller_ids(self) -> None:
        """Tell the controller when the quorum's voter set changed (KIP-853:
        controllers are added at run time, and node ids are one namespace, so a
        broker may not register with a controller's id)."""
        core = self.raft.core
        if core is not None and core.voters_version != self._voters_version:
            self._voters_version = core.voters_version
            self.controller.add_controller_ids(core.voters)

    def _on_raft_state(self, state: str, epoch: int, leader_id: int | None) -> None:
        if state == "candidate":
            self.metrics.elections.inc()
        if leader_id is not None and (leader_id, epoch) != self._last_leader:
            self._last_leader = (leader_id, epoch)
            self.metrics.leader_changes.inc()

    # --------------------------------------------------------------- snapshots

    def _maybe_snapshot(self) -> None:
        if self._snapshot_task is not None or self._stopped.is_set():
            return
        now = self._clock()
        due = self._bytes_since_snapshot >= self.snapshot_bytes or (
            self.snapshot_interval_ms > 0
            and self._bytes_since_snapshot > 0
            and now - self._last_snapshot_ms >= self.snapshot_interval_ms
        )
        if not due:
            return
        image = self.controller.image
        committed = self.raft.delivered_offset - 1
        if (
            image.offset != committed  # uncommitted replays (active): wait for a quiet moment
            or image.offset < 0
            or image.in_transaction
            or image.offset >= self.log.flushed_offset  # not durable here yet
        ):
            return
        snap = self.log.latest_snapshot_id()
        if snap is not None and snap.end_offset > image.offset:
            return
        sid = SnapshotId(image.offset + 1, self.log.epoch_for_offset(image.offset))
        core = self.raft.core
        voters = core.voters_record_at(sid.end_offset) if core else None
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = now
        t0 = time.perf_counter()
        if self._fork_snapshots:
            # the child sees the image as of now, copy-on-write: nothing copied here
            pid = fork_writer(self._snapshot_writer(sid, image, voters))
            written = self._snapshot_child(pid)
        else:
            written = asyncio.to_thread(self._snapshot_writer(sid, image.copy(), voters))
        self._snapshot_task = asyncio.get_running_loop().create_task(
            self._write_snapshot(sid, written, t0), name="controller-snapshot"
        )

    def _snapshot_writer(
        self, sid: SnapshotId, image: MetadataImage, voters: VotersRecord | None
    ) -> Callable[[], object]:
        """What writes `image` as snapshot `sid`, in a thread or a forked child."""
        directory = self.log.directory
        stamp = self._timestamp()  # a timestamp in the snapshot's header
        return lambda: write_snapshot(
            directory,
            sid,
            image.to_records(),
            last_contained_log_time=image.last_append_time_ms,
            append_time_ms=stamp,
            voters=voters,
        )

    async def _snapshot_child(self, pid: int) -> None:
        code = await wait_child(pid)
        if code != 0:
            raise RuntimeError(f"the snapshot writer (pid {pid}) exited with {code}")

    async def _write_snapshot(self, sid: SnapshotId, written: Awaitable[object], t0: float) -> None:
        try:
            await written
            if self._stopped.is_set() and self.log.file_log.closed:
                return
            self.log.register_snapshot(sid)
            self.snapshots_written += 1
            freeze_heap()  # the image as of the snapshot has lived long enough
            trimmed = self._maybe_trim(sid)
            log.info(
                "wrote snapshot",
                extra={
                    "event": "snapshot_written",
                    "snapshot": sid.file_name,
                    "ms": round((time.perf_counter() - t0) * 1000, 1),
                    "writer": "child" if self._fork_snapshots else "thread",
                    "log_start_offset": self.log.start_offset,
                    "trimmed": trimmed,
                },
            )
        except Exception as e:  # noqa: BLE001 - a failed snapshot is retried at the next one
            log.error(
                "snapshot %s failed: %s", sid.file_name, e, extra={"event": "snapshot_failed"}
            )
        finally:
            self._snapshot_task = None

    def _maybe_trim(self, sid: SnapshotId) -> bool:
        """Retention once snapshot `sid` is registered, as Kafka's
        KafkaMetadataLog.maybeClean: oldest first, the oldest snapshot goes and the
        segments below the next one with it, only while the log and the snapshots
        exceed `metadata.max.retention.bytes`, or while that snapshot's last batch is
        older than `metadata.max.retention.ms` (wall clock, as the batches' append
        times); the newest snapshot (`sid`) and the log after it always stay. The
        decision is file_log_adapter.retention_cut's (pure); True when segments went."""
        before = self.log.start_offset
        self.log.clean_retention(self.retention_bytes, self.retention_ms, self._timestamp())
        return self.log.start_offset > before

    # ----------------------------------------------------------------- metrics

    def _gauges(self) -> dict[str, float]:
        core = self.raft.core
        image = self.controller.image
        out: dict[str, float] = {
            "active": 1.0 if self.controller.active else 0.0,
            "last_committed_offset": self.raft.delivered_offset - 1,
            "last_applied_offset": image.offset,
            "log_end_offset": self.log.end_offset,
        }
        out.update(image_gauges(image, len(self.controller.index.leaderless)))
        out["preferred_replica_imbalance"] = self.controller.imbalanced_partition_count()
        fenced, records, ms = self.metrics.last_fence
        out["last_fenced_broker"] = fenced
        out["last_fence_records"] = records
        out["last_fence_commit_ms"] = ms
        fronts = self.heartbeat_fronts
        if fronts is not None:
            out["front_heartbeats"] = fronts.answered
            out["front_connections"] = len(fronts.open)
            out["front_handed_over"] = fronts.handed_over
        if core is not None:
            out["current_leader"] = -1 if core.leader_id is None else core.leader_id
            out["current_epoch"] = core.epoch
            out["high_watermark"] = core.high_watermark
            out["raft_state"] = RAFT_STATE_CODES.get(core.state_name, 0)
        return out


# ------------------------------------------------------------------------- CLI


def add_controller_parser(sub: Any) -> None:
    p = sub.add_parser(
        "controller",
        help="run one controller quorum node",
        description=(
            "Run one controller quorum node, listening on its own voter address. The first "
            "start formats DATA_DIR (meta.properties); the cluster id defaults to one derived "
            "from the voters, so nodes started with the same --voters agree."
        ),
    )
    p.add_argument("--node-id", type=int, default=None, help="this node's id (node.id)")
    p.add_argument(
        "--voters",
        default=None,
        metavar="ID@HOST:PORT,...",
        help="the voter set (controller.quorum.voters)",
    )
    p.add_argument(
        "--bootstrap-controllers",
        default=None,
        metavar="URL,...",
        help=(
            "instead of --voters: start as an observer that finds the quorum through these "
            "controller URLs (controller.quorum.bootstrap.servers, KIP-853); once caught up "
            "it can be added with `kraft quorum add-controller`. Needs --listen and "
            "--cluster-id (learned from the bootstrap controllers when not given)"
        ),
    )
    p.add_argument("--data-dir", default=None, help="the data directory (metadata.log.dir)")
    p.add_argument("--cluster-id", default=None, help="default: derived from the voters")
    p.add_argument(
        "--listen",
        default=None,
        metavar="HOST:PORT",
        help="where to listen (default: this node's voter address)",
    )
    p.add_argument("--config", default=None, metavar="FILE", help="a Kafka-style properties file")
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a configuration value that wins over --config (repeatable)",
    )
    p.add_argument("--log-format", choices=("text", "json"), default="text")
    p.add_argument(
        "--log-level",
        type=str.upper,
        default="INFO",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
    )


def _settings_from_args(args: Any) -> NodeSettings:
    from kraft.config import CONTROLLER_KEYS, load_config, parse_voters

    explicit: dict[str, Any] = {}
    if args.node_id is not None:
        if args.node_id < 0:
            raise ConfigError(f"--node-id must be >= 0, got {args.node_id}")
        explicit["node.id"] = args.node_id
    if args.voters is not None:
        explicit["controller.quorum.voters"] = parse_voters(args.voters)
    if args.data_dir is not None:
        explicit["metadata.log.dir"] = args.data_dir
    config = load_config(CONTROLLER_KEYS, args.config, args.override, explicit)
    node_id = config.get("node.id")
    voters = config.get("controller.quorum.voters")
    data_dir = config.get("metadata.log.dir")
    bootstrap: tuple[str, ...] = ()
    if getattr(args, "bootstrap_controllers", None):
        if args.voters is not None:
            raise ConfigError("give --voters or --bootstrap-controllers, not both")
        voters = None
        bootstrap = tuple(
            u.strip().rstrip("/") for u in args.bootstrap_controllers.split(",") if u.strip()
        )
        for u in bootstrap:
            if not u.startswith(("http://", "https://")):
                raise ConfigError(f"--bootstrap-controllers: {u!r} is not an http(s):// URL")
        if not bootstrap:
            raise ConfigError("--bootstrap-controllers is empty")
        if args.listen is None:
            raise ConfigError("--listen is required with --bootstrap-controllers")
    if node_id is None:
        raise ConfigError("--node-id (node.id) is required")
    if voters is None and not bootstrap:
        raise ConfigError("--voters (controller.quorum.voters) is required")
    if data_dir is None:
        raise ConfigError("--data-dir (metadata.log.dir) is required")
    listen = None
    if args.listen is not None:
        try:
            host, port = args.listen.rsplit(":", 1)
            listen = (host.strip("[]") or "0.0.0.0", int(port))
        except ValueError:
            raise ConfigError(f"--listen {args.listen!r} is not HOST:PORT") from None
        if not 0 <= listen[1] <= 65535:
            # the kernel would take it modulo 65536: another port than the one logged
            raise ConfigError(f"--listen {args.listen!r}: the port must be in 0..65535")
    if args.cluster_id is not None and not args.cluster_id.strip():
        raise ConfigError("--cluster-id must not be empty")
    config.log_unused(log)
    return NodeSettings(node_id, voters, Path(data_dir), args.cluster_id, listen, config, bootstrap)


async def get_quorum_view(url: str, sec: ClientSecurity, timeout_s: float) -> dict[str, Any]:
    """GET URL/v1/quorum with `sec` (TLS material and token): the JSON object, or
    OSError (no answer), TimeoutError or ValueError (not a 200 JSON object)."""
    import aiohttp

    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
            session.get(f"{url}/v1/quorum", ssl=sec.ssl, headers=sec.headers_with({})) as resp,
        ):
            if resp.status != 200:
                raise ValueError(f"HTTP {resp.status}")
            body = await resp.json(content_type=None)
    except aiohttp.ClientError as e:  # a disconnect, a bad payload: no answer
        raise OSError(str(e) or type(e).__name__) from None
    if not isinstance(body, dict):
        raise ValueError("its answer is not a JSON object")
    return body


async def learn_cluster_id(
    urls: tuple[str, ...], timeout_s: float = 5.0, config: Config | None = None
) -> str:
    """The cluster id, from the first bootstrap controller that answers GET /v1/quorum."""
    from kraft.security.client_security import from_config

    sec = from_config(config)
    errors = []
    for url in urls:
        try:
            cid = (await get_quorum_view(url, sec, timeout_s)).get("cluster_id")
        except (TimeoutError, OSError, ValueError) as e:
            errors.append(f"{url}: {type(e).__name__}: {e}")
            continue
        if isinstance(cid, str) and cid:
            return cid
        errors.append(f"{url}: no cluster_id in its answer")
    raise ConfigError(
        "cannot learn the cluster id from --bootstrap-controllers (give --cluster-id): "
        + "; ".join(errors)
    )


async def serve(settings: NodeSettings) -> int:
    """Run a node until SIGTERM/SIGINT (exit 0) or a fatal error (exit 1), holding its
    data directory's lock throughout (DataDirInUse when another process holds it)."""
    with hold_dir_lock(Path(settings.data_dir)):
        return await _serve(settings)


async def _serve(settings: NodeSettings) -> int:
    import signal

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    # first: a signal while the cluster id is still being asked for stops cleanly too
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if settings.bootstrap_controllers and settings.cluster_id is None:
        props = read_meta(Path(settings.data_dir))
        if props is not None and props.get("cluster.id"):
            settings.cluster_id = props["cluster.id"]
        else:
            learn = asyncio.ensure_future(
                learn_cluster_id(settings.bootstrap_controllers, config=settings.config)
            )
            stop_wait = asyncio.ensure_future(stop.wait())
            await asyncio.wait({learn, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            stop_wait.cancel()
            if not learn.done():
                learn.cancel()
                await asyncio.gather(learn, return_exceptions=True)
                log.info(
                    "signal received before the cluster id was learned: stopping",
                    extra={"event": "stopping"},
                )
                return 0
            settings.cluster_id = learn.result()
    gc.set_threshold(*GC_THRESHOLDS)  # before start: loading a big snapshot allocates millions
    node = ControllerNode(settings)
    # SIGHUP: re-read the keystore, truststore, credentials and token files (issue 25)
    loop.add_signal_handler(signal.SIGHUP, node.security_reloader.reload)
    try:
        await node.start()
    except BaseException:
        node.log.close()
        raise
    tune_gc()  # a process-wide setting; the code, the loaded image and the log are long-lived
    failed = node.failed
    assert failed is not None
    stop_wait = asyncio.ensure_future(stop.wait())
    await asyncio.wait({stop_wait, failed}, return_when=asyncio.FIRST_COMPLETED)
    stop_wait.cancel()
    code = 0
    if failed.done():
        err = failed.result()
        log.error(
            "stopping after a fatal error: %s", err, extra={"event": "fatal", "error": str(err)}
        )
        code = 1
    else:
        log.info("signal received: stopping", extra={"event": "stopping"})
    await node.stop()
    return code


def run_controller(args: Any) -> int:
    """`kraft controller ...`: user errors are one line on stderr, never a traceback."""
    import signal
    import sys

    from kraft.logs import setup_logging
    from metadata_log.errors import MetadataLogError

    setup_logging(args.log_format, args.log_level)
    try:
        settings = _settings_from_args(args)
    except ConfigError as e:
        print(f"kraft controller: error: {e}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(serve(settings))
    except ConfigError as e:
        print(f"kraft controller: error: {e}", file=sys.stderr)
        return 2
    except (FormatError, DataDirInUse, OSError, MetadataLogError, QuorumStateError) as e:
        print(f"kraft controller: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        # The node has stopped; a repeated SIGTERM while the interpreter winds down
        # (worker threads, atexit) must not turn a clean exit into a signal death.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
