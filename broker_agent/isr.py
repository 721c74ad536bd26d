"""ISR dynamics of a partition leader, as a pure decision-maker (Kafka's Partition +
AlterPartitionManager, with replication simulated).

A broker that leads partitions sends AlterPartition (`POST /v1/partitions/alter`)
with the leader epoch, the partition epoch and the broker epochs of the new ISR,
all taken from its own metadata image:

- expansion (on by default, `broker.isr.expansion.enable`): a replica outside the
  ISR rejoins once it is alive (registered, unfenced, not shutting down) and has
  "caught up": alive continuously for `catch_up_ms` with its current broker epoch
  (a restarted broker starts over), and not inside a simulated lag window;
- shrinking (off by default; `--simulate-lag` or `broker.simulated.lag.probability`):
  at every check each ISR follower lags out with the given probability, drawn
  from the seeded rng; it stays out for a random lag window, then rejoins by
  expansion. So the log holds ISR changes that fencing did not cause.

Replication itself is simulated, as KIP-966's rules need it:

- a replica being added by a reassignment (KIP-455, in `adding_replicas`) must copy
  the log first: it is caught up only `catch_up_ms` after the leader first saw it
  in the replica set, then the leader adds it to the ISR like any other (and the
  controller completes the reassignment);
- each led partition has a log end offset that grows by one record per check (a
  steady writer) and a high watermark that follows it only while the ISR has at
  least `min.insync.replicas` members (the topic's config, else the broker's
  default): Kafka's strict min ISR rule, which is what makes every ELR member a
  safe, clean leader. `under_min_isr` counts the partitions held back.

One request per partition at a time, a bounded number in flight; after an answer
the partition waits until the image shows the new partition epoch (bounded by a
timeout), after an error it backs off with jitter. Takes `now_ms`; no I/O, no clock.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kraft.config import default_of
from metadata_log.image import MetadataImage, PartitionRegistration

PartitionKey = tuple[str, int]  # (topic_id, partition_id)
RECOVERED, RECOVERING = 0, 1


@dataclass(frozen=True, slots=True)
class IsrConfig:
    expansion_enabled: bool = default_of("broker.isr.expansion.enable")
    lag_probability: float = 0.0  # per ISR follower per check
    check_interval_ms: int = 2000
    catch_up_ms: int = 1000
    lag_min_ms: int = 3000
    lag_max_ms: int = 15_000
    max_in_flight: int = 8
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 500
    retry_backoff_max_ms: int = 5000
    pending_timeout_ms: int = 10_000
    min_insync_replicas: int = default_of("min.insync.replicas")  # a topic's config wins

    def __post_init__(self) -> None:
        if not 0.0 <= self.lag_probability <= 1.0:
            raise ValueError(f"lag probability must be in [0, 1], got {self.lag_probability}")
        if self.lag_min_ms > self.lag_max_ms:
            raise ValueError("lag_min_ms must not exceed lag_max_ms")


@dataclass(frozen=True, slots=True)
class AlterSend:
    """An AlterPartition request to send to the active controller."""

    request_id: int
    key: PartitionKey
    body: dict[str, Any]
    timeout_ms: int
    reason: str  # "expand" | "shrink" | "recover"


@dataclass(slots=True)
class _Flight:
    send: AlterSend
    deadline_ms: int


class IsrManager:
    def __init__(self, broker_id: int, config: IsrConfig, rng: random.Random) -> None:
        self.broker_id = broker_id
        self.config = config
        self.rng = rng
        self._next_request_id = 1
        self._in_flight: dict[int, _Flight] = {}
        self._busy: dict[PartitionKey, int] = {}
        self._waiting: dict[PartitionKey, tuple[int, int]] = {}  # key -> (epoch, deadline)
        self._retry_at: dict[PartitionKey, int] = {}
        self._failures: dict[PartitionKey, int] = {}
        self._alive_since: dict[tuple[int, int], int] = {}  # (broker, epoch) -> since
        self._lagging_until: dict[tuple[PartitionKey, int], int] = {}
        # (partition, adding replica) -> when the leader first saw it in the replicas
        self._adding_since: dict[tuple[PartitionKey, int], int] = {}
        # simulated log of each led partition: key -> [log end offset, high watermark]
        self.logs: dict[PartitionKey, list[int]] = {}
        self._next_check_ms: int | None = None
        self.expansions = 0
        self.shrinks = 0
        self.recoveries = 0  # RECOVERING partitions this leader marked RECOVERED
        self.errors = 0

    # ---------------------------------------------------------------- helpers

    def _alive(self, image: MetadataImage, broker_id: int, now_ms: int) -> int | None:
        """Since when `broker_id` has been alive with its current epoch, or None."""
        b = image.brokers.get(broker_id)
        if b is None or b.fenced or b.in_controlled_shutdown:
            return None
        return self._alive_since.setdefault((broker_id, b.broker_epoch), now_ms)

    def _caught_up(
        self, image: MetadataImage, key: PartitionKey, p: PartitionRegistration, r: int, now_ms: int
    ) -> bool:
        since = self._alive(image, r, now_ms)
        if since is None or now_ms - since < self.config.catch_up_ms:
            return False
        if r in p.adding_replicas:
            # a new replica copies the whole log before it can join the ISR
            added = self._adding_since.setdefault((key, r), now_ms)
            if now_ms - added < self.config.catch_up_ms:
                return False
        return now_ms >= self._lagging_until.get((key, r), 0)

    def _min_isr(self, image: MetadataImage, topic_name: str) -> int:
        value = image.topic_configs(topic_name).get("min.insync.replicas")
        try:
            return max(1, int(value)) if value is not None else self.config.min_insync_replicas
        except ValueError:
            return self.config.min_insync_replicas

    def _replicate(self, image: MetadataImage, led: Iterable[PartitionKey]) -> None:
        """One check's worth of simulated writes: every led partition's log grows by
        one record; its high watermark follows only with at least min ISR members."""
        min_isr: dict[str, int] = {}
        logs: dict[PartitionKey, list[int]] = {}
        for key in led:
            topic = image.topics.get(key[0])
            p = None if topic is None else topic.partitions.get(key[1])
            if p is None or p.leader != self.broker_id or topic is None:
                continue
            log = self.logs.get(key) or [0, 0]
            log[0] += 1
            need = min_isr.get(topic.name)
            if need is None:
                need = min_isr[topic.name] = self._min_isr(image, topic.name)
            if len(p.isr) >= need:
                log[1] = log[0]
            logs[key] = log
        self.logs = logs  # partitions no longer led are forgotten

    @property
    def under_min_isr(self) -> int:
        """Led partitions whose high watermark is held back (strict min ISR)."""
        return sum(1 for leo, hw in self.logs.values() if hw < leo)

    def _body(
        self,
        image: MetadataImage,
        key: PartitionKey,
        p: PartitionRegistration,
        broker_epoch: int,
        new_isr: list[int],
        leader_recovery_state: int,
    ) -> dict[str, Any]:
        def epoch_of(b: int) -> int:
            reg = image.brokers.get(b)
            return -1 if reg is None else reg.broker_epoch

        return {
            "broker_id": self.broker_id,
            "broker_epoch": broker_epoch,
            "topic_id": key[0],
            "partition_id": key[1],
            "leader_epoch": p.leader_epoch,
            "partition_epoch": p.partition_epoch,
            "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": epoch_of(b)} for b in new_isr],
            "leader_recovery_state": leader_recovery_state,
        }

    def _backoff(self, key: PartitionKey, now_ms: int) -> None:
        """Bounded exponential backoff with jitter, per partition."""
        failures = self._failures.get(key, 0)
        base = min(
            self.config.retry_backoff_max_ms, self.config.retry_backoff_ms * 2 ** min(failures, 20)
        )
        delay = min(self.config.retry_backoff_max_ms, int(base * self.rng.uniform(0.8, 1.2)))
        self._retry_at[key] = now_ms + delay
        self._failures[key] = failures + 1

    # ---------------------------------------------------------------- events

    def poll(
        self,
        image: MetadataImage,
        led: Iterable[PartitionKey],
        broker_epoch: int,
        active: bool,
        now_ms: int,
    ) -> list[AlterSend]:
        """What to send now. `led`: partitions this broker leads in `image`; `active`:
        the broker is RUNNING (registered and unfenced)."""
        for rid in [r for r, f in self._in_flight.items() if now_ms >= f.deadline_ms]:
            flight = self._finish(rid)
            self.errors += 1
            if flight is not None:
                self._backoff(flight.send.key, now_ms)
        if any(t <= now_ms for t in self._retry_at.values()):
            self._retry_at = {k: t for k, t in self._retry_at.items() if t > now_ms}
        me = image.brokers.get(self.broker_id)
        if not active or me is None or me.broker_epoch != broker_epoch or me.fenced:
            # our image has not caught up with our own registration yet
            return []
        check = False
        if self._next_check_ms is None or now_ms >= self._next_check_ms:
            check = True
            self._next_check_ms = now_ms + self.config.check_interval_ms
        cfg = self.config
        if check:
            self._replicate(image, led)
        sends: list[AlterSend] = []
        for key in sorted(led):
            if len(self._in_flight) >= cfg.max_in_flight:
                break
            if key in self._busy:
                continue
            topic = image.topics.get(key[0])
            p = None if topic is None else topic.partitions.get(key[1])
            if p is None or p.leader != self.broker_id:
                continue
            waiting = self._waiting.get(key)
            if waiting is not None:
                if p.partition_epoch < waiting[0] and now_ms < waiting[1]:
                    continue
                del self._waiting[key]
            if key in self._retry_at:
                continue
            new_isr = list(p.isr)
            reason = None
            recovered = p.leader_recovery_state
            if p.leader_recovery_state == RECOVERING:
                # an unclean (or last-known-leader) election: the leader's log is the
                # truth now; it says so (RECOVERED) before anyone joins its ISR, as
                # Kafka's Partition does once its log is ready (KIP-704)
                new_isr, reason, recovered = [self.broker_id], "recover", RECOVERED
            if reason is None and check and cfg.lag_probability > 0:
                for r in p.isr:
                    if r != self.broker_id and self.rng.random() < cfg.lag_probability:
                        new_isr.remove(r)
                        self._lagging_until[(key, r)] = now_ms + self.rng.randint(
                            cfg.lag_min_ms, cfg.lag_max_ms
                        )
                        reason = "shrink"
                        break
            if reason is None and cfg.expansion_enabled:
                for r in p.replicas:
                    if r not in new_isr and self._caught_up(image, key, p, r, now_ms):
                        new_isr.append(r)
                        reason = "expand"
            if reason is None:
                continue
            rid = self._next_request_id
            self._next_request_id += 1
            send = AlterSend(
                rid,
                key,
                self._body(image, key, p, broker_epoch, new_isr, recovered),
                cfg.request_timeout_ms,
                reason,
            )
            self._in_flight[rid] = _Flight(send, now_ms + cfg.request_timeout_ms)
            self._busy[key] = rid
            sends.append(send)
        self._forget_old(now_ms)
        return sends

    def _forget_old(self, now_ms: int) -> None:
        if len(self._lagging_until) > 10_000:
            self._lagging_until = {k: t for k, t in self._lagging_until.items() if t > now_ms}
        if len(self._adding_since) > 10_000:
            self._adding_since.clear()
        if len(self._alive_since) > 100_000:
            self._alive_since.clear()
        if len(self._failures) > 10_000:
            self._failures.clear()

    def _finish(self, request_id: int) -> _Flight | None:
        flight = self._in_flight.pop(request_id, None)
        if flight is not None and self._busy.get(flight.send.key) == request_id:
            del self._busy[flight.send.key]
        return flight

    def on_response(self, request_id: int, reply: dict[str, Any], now_ms: int) -> None:
        flight = self._finish(request_id)
        if flight is None:
            return
        key = flight.send.key
        self._failures.pop(key, None)
        if flight.send.reason == "expand":
            self.expansions += 1
        elif flight.send.reason == "shrink":
            self.shrinks += 1
        else:
            self.recoveries += 1
        epoch = reply.get("partition_epoch") if isinstance(reply, dict) else None
        if type(epoch) is int:
            self._waiting[key] = (epoch, now_ms + self.config.pending_timeout_ms)

    def on_error(self, request_id: int, code: str, now_ms: int) -> None:
        """An error answer: FENCED_LEADER_EPOCH / INVALID_UPDATE_VERSION mean our image
        is behind (wait for it to move), others (NOT_CONTROLLER, INELIGIBLE_REPLICA,
        NETWORK, ...) back off and retry from the image then current."""
        flight = self._finish(request_id)
        if flight is None:
            return
        self.errors += 1
        key = flight.send.key
        if code in ("FENCED_LEADER_EPOCH", "INVALID_UPDATE_VERSION"):
            epoch = flight.send.body["partition_epoch"] + 1
            self._waiting[key] = (epoch, now_ms + self.config.pending_timeout_ms)
        self._backoff(key, now_ms)

    def next_wake_ms(self) -> int | None:
        """When poll() has something to do by time alone (None: only on image changes)."""
        times = [f.deadline_ms for f in self._in_flight.values()]
        if self._next_check_ms is not None:
            times.append(self._next_check_ms)
        times.extend(self._retry_at.values())
        return min(times) if times else None

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)
