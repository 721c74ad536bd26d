"""Prometheus metrics of a controller, with Kafka's names (as jmx_exporter prints them).

Gauges are read from the live state at scrape time (a custom collector), so they
cost nothing between scrapes; histograms and counters are updated as events
happen. One registry per process.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS_MS = (0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


class FullCollectionTimer:
    """A `gc.callbacks` entry that hands each full (generation 2) collection's pause,
    in ms, to `observe`: the controllers' histogram, a benchmark's own tally."""

    def __init__(self, observe: Callable[[float], Any]) -> None:
        self._observe = observe
        self._started: float | None = None

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            self._observe((time.perf_counter() - self._started) * 1000)
            self._started = None


class _StateCollector:
    def __init__(self, read: Callable[[], dict[str, float]]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        values = self._read()
        for name, (help_text, key) in GAUGES.items():
            if key in values:
                yield GaugeMetricFamily(name, help_text, value=values[key])


class _ConnectionCollector:
    """The listener's connection limits (kraft.server.limits), read at scrape time."""

    def __init__(self, read: Callable[[], dict[str, Any]]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        s = self._read()
        yield GaugeMetricFamily(
            "kafka_server_socket_server_metrics_connection_count",
            "open connections on the controller listener",
            value=s["open"],
        )
        yield GaugeMetricFamily(
            "kraft_server_connections_waiting",
            "accepted connections waiting for a max.connection.creation.rate token",
            value=s["waiting"],
        )
        yield GaugeMetricFamily(
            "kraft_server_connections_handshake_queued",
            "admitted TLS connections waiting in line for a handshake slot",
            value=s.get("handshake_queued", 0),
        )
        yield GaugeMetricFamily(
            "kraft_server_connections_handshaking",
            "TLS handshakes holding a slot (at most 32 at once)",
            value=s.get("handshaking", 0),
        )
        admitted = CounterMetricFamily(
            "kraft_server_connections_admitted", "connections admitted since start"
        )
        admitted.add_metric([], s["admitted"])
        yield admitted
        yield _labelled(
            CounterMetricFamily,
            "kraft_server_connections_refused",
            "connections closed unserved since start, by the limit that refused them",
            "reason",
            s["refused"],
        )
        yield _labelled(
            CounterMetricFamily,
            "kraft_server_connections_evicted",
            "open connections closed before completing a request since start: for a "
            "newcomer at max.connections, or at connections.request.head.timeout.ms",
            "reason",
            s["evicted"],
        )
        yield _labelled(
            GaugeMetricFamily,
            "kraft_server_connection_limit",
            "the listener's configured connection limits",
            "limit",
            s["limits"],
        )


def _labelled(family: Any, name: str, help_text: str, label: str, values: dict[str, float]) -> Any:
    """One metric family with a sample per `values` item, labelled by its key."""
    out = family(name, help_text, labels=[label])
    for key, value in values.items():
        out.add_metric([key], value)
    return out


GAUGES: dict[str, tuple[str, str]] = {
    "kafka_controller_kafkacontroller_activecontrollercount": (
        "1 on the active controller, else 0",
        "active",
    ),
    "kafka_controller_kafkacontroller_fencedbrokercount": (
        "registered brokers that are fenced",
        "fenced_brokers",
    ),
    "kafka_controller_kafkacontroller_activebrokercount": (
        "registered brokers that are unfenced",
        "active_brokers",
    ),
    "kafka_controller_kafkacontroller_globaltopiccount": ("topics", "topics"),
    "kafka_controller_kafkacontroller_globalpartitioncount": ("partitions", "partitions"),
    "kafka_controller_kafkacontroller_offlinepartitionscount": (
        "partitions without a leader",
        "offline_partitions",
    ),
    # Kafka's name: partitions whose leader is not their preferred (first) replica,
    # leaderless ones included; the balancer's work left (kept by replay)
    "kafka_controller_kafkacontroller_preferredreplicaimbalancecount": (
        "partitions whose leader is not their preferred replica",
        "preferred_replica_imbalance",
    ),
    "kafka_controller_kafkacontroller_lastcommittedrecordoffset": (
        "offset of the last committed record",
        "last_committed_offset",
    ),
    "kafka_controller_kafkacontroller_lastappliedrecordoffset": (
        "offset of the last replayed record",
        "last_applied_offset",
    ),
    "kafka_server_raft_metrics_current_leader": (
        "the current Raft leader's id (-1: unknown)",
        "current_leader",
    ),
    "kafka_server_raft_metrics_current_epoch": ("the current Raft epoch", "current_epoch"),
    "kafka_server_raft_metrics_high_watermark": ("the Raft high watermark", "high_watermark"),
    "kafka_server_raft_metrics_log_end_offset": ("this node's log end offset", "log_end_offset"),
    "kraft_controller_last_fenced_broker_id": (
        "the broker whose session-expiry fence this controller committed last (-1: none)",
        "last_fenced_broker",
    ),
    "kraft_controller_last_fence_commit_ms": (
        "that fence's time from decision until the high watermark passed its records (ms)",
        "last_fence_commit_ms",
    ),
    "kraft_controller_last_fence_records": (
        "that fence's record count (its partition changes and the FenceBrokerRecord)",
        "last_fence_records",
    ),
    "kraft_server_heartbeat_front_heartbeats": (
        "heartbeats answered by the lean heartbeat front since start (the rest go through aiohttp)",
        "front_heartbeats",
    ),
    "kraft_server_heartbeat_front_connections": (
        "open connections served by the heartbeat front",
        "front_connections",
    ),
    "kraft_server_heartbeat_front_handed_over": (
        "connections the heartbeat front handed to aiohttp since start (a request other than a heartbeat)",
        "front_handed_over",
    ),
    "kafka_server_raft_metrics_current_state": (
        "Raft state: 0 unattached, 1 follower, 2 candidate, 3 leader, 4 resigned, 5 prospective, 6 observer",
        "raft_state",
    ),
}


class ControllerMetrics:
    def __init__(self, read_state: Callable[[], dict[str, float]]) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_StateCollector(read_state))  # type: ignore[arg-type]
        self.commit_latency = Histogram(
            "kafka_server_raft_metrics_commit_latency_ms",
            "time from append to commit of a controller write (ms)",
            buckets=LATENCY_BUCKETS_MS,
            registry=self.registry,
        )
        self.event_queue_time = Histogram(
            "kafka_controller_controllereventmanager_eventqueuetimems",
            "time an event waited in the controller's queue (ms)",
            buckets=LATENCY_BUCKETS_MS,
            registry=self.registry,
        )
        self.elections = Counter(
            "kafka_server_raft_metrics_elections",
            "Raft elections this node started (as candidate)",
            registry=self.registry,
        )
        self.leader_changes = Counter(
            "kafka_server_raft_metrics_leader_changes",
            "times this node saw a new Raft leader",
            registry=self.registry,
        )
        self.partition_elections = Counter(
            "kafka_controller_controllerstats_leaderelections",
            "partition leader elections written by this controller",
            ["unclean"],
            registry=self.registry,
        )
        self.fence_commit = Histogram(
            "kraft_controller_fence_commit_ms",
            "time from a fence decision (the stalest broker's check) until its records "
            "(partition changes, then FenceBrokerRecord) committed (ms)",
            buckets=LATENCY_BUCKETS_MS,
            registry=self.registry,
        )
        self.fences = Counter(
            "kafka_controller_controllerstats_brokerfences",
            "brokers fenced by this controller for missing their session",
            registry=self.registry,
        )

        self.gc_pause = Histogram(
            "kraft_python_gc_full_collection_ms",
            "pauses of the interpreter's full (generation 2) garbage collections (ms): "
            "they stop the event loop, so they show in request latency",
            buckets=LATENCY_BUCKETS_MS,
            registry=self.registry,
        )
        self._on_gc = FullCollectionTimer(self.gc_pause.observe)
        self._connections: _ConnectionCollector | None = None
        self.last_fence: tuple[int, int, float] = (-1, 0, 0.0)  # broker, records, ms

    def fence_committed(self, broker_id: int, records: int, ms: float) -> None:
        self.fence_commit.observe(ms)
        self.last_fence = (broker_id, records, ms)

    def watch_gc(self) -> None:
        """Time full collections (gc.callbacks) until `unwatch_gc`."""
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)

    def unwatch_gc(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def watch_connections(self, read: Callable[[], dict[str, Any]]) -> None:
        """Export the listener's connection limits (kraft.server.limits.GuardedSite)."""
        self.unwatch_connections()
        self._connections = _ConnectionCollector(read)
        self.registry.register(self._connections)  # type: ignore[arg-type]

    def unwatch_connections(self) -> None:
        if self._connections is not None:
            self.registry.unregister(self._connections)  # type: ignore[arg-type]
            self._connections = None

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def image_gauges(image: Any, offline_partitions: int | None = None) -> dict[str, float]:
    """`offline_partitions`: the count if known (the controller's index keeps it);
    counting a million partitions on every scrape held the loop ~50 ms each."""
    fenced = sum(1 for b in image.brokers.values() if b.fenced)
    return {
        "fenced_brokers": fenced,
        "active_brokers": len(image.brokers) - fenced,
        "topics": len(image.topics),
        "partitions": image.partition_count(),
        "offline_partitions": (
            image.offline_partition_count() if offline_partitions is None else offline_partitions
        ),
    }
