"""Pieces of the chaos test: a proxied cluster, a topic writer, a fault injector and a
quorum watcher.

- `ChaosCluster`: a `LocalCluster` whose controllers reach each other only through
  a fault-injecting TCP proxy (one link per direction), so links can be cut.
- `TopicWriter`: a thread creating and deleting uniquely named topics through the
  active controller; it keeps every reply it got, so that acknowledged writes can
  be checked against the log at the end.
- `FaultInjector`: every few seconds a seeded random fault (kill -9 + restart later,
  SIGSTOP + SIGCONT later, graceful restart, a controller isolated, one link cut);
  every fault is undone by a scheduled recovery, and `heal()` undoes all at once.
- `QuorumWatcher`: samples every controller's /v1/quorum and remembers which leader
  each node saw in each epoch (two leaders in one epoch is a violation).
- `CredentialRotation` (secured runs, issue 25): the fault that rotates credentials
  in the running cluster, one step of the README recipe at a time (a new CA trusted
  beside the old, every certificate and token renewed, the old CA dropped, the old
  tokens dropped); each step SIGHUPs some processes, the rest find the changed
  files by their poll.

Everything here signals only processes that its LocalCluster started.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kraft.local.cluster import ClusterSpec, LocalCluster, free_ports, http_json
from kraft.security import certs as C
from kraft.security.client_security import NONE, ClientSecurity
from kraft.security.reload import Reloader
from tests.integration.netproxy import NetProxy

HOST = "127.0.0.1"


def now_s(t0: float) -> str:
    return f"{time.monotonic() - t0:7.1f}s"


class ChaosCluster:
    """Controllers that talk to each other through NetProxy links named 'i->j'."""

    def __init__(self, data_dir: Path, controllers: int, brokers: int, spec_kw: dict[str, Any]):
        ports = free_ports(controllers + controllers * (controllers - 1), HOST)
        real, proxy_ports = ports[:controllers], iter(ports[controllers:])
        self.peer_ports = {
            (i, j): next(proxy_ports)
            for i in range(1, controllers + 1)
            for j in range(1, controllers + 1)
            if i != j
        }
        spec = ClusterSpec(controllers=controllers, brokers=brokers, data_dir=data_dir, **spec_kw)
        self.cluster = LocalCluster(spec, ports=real, peer_ports=self.peer_ports)
        self.proxy = NetProxy()
        for (i, j), port in self.peer_ports.items():
            self.proxy.add(f"{i}->{j}", port, real[j - 1])

    def links_of(self, nid: int) -> list[str]:
        return [f"{i}->{j}" for (i, j) in self.peer_ports if nid in (i, j)]

    def close(self) -> dict[str, int | None]:
        """Stop every process this cluster started (SIGCONT first), then the proxies."""
        try:
            for n in self.cluster.nodes.values():
                self.cluster.resume(n.node_id)
            return self.cluster.stop_all(timeout=20)
        finally:
            self.proxy.close()


# ------------------------------------------------------------------ the writer


@dataclass
class WriterLog:
    acked_creates: dict[str, str] = field(default_factory=dict)  # name -> topic_id
    acked_deletes: dict[str, str] = field(default_factory=dict)  # name -> topic_id
    # deletes of acknowledged topics with an unknown outcome: deleted or not
    unknown_deletes: dict[str, str] = field(default_factory=dict)  # name -> topic_id
    refused: int = 0  # a definite error reply (nothing written)
    unknown: int = 0  # timed out / ambiguous: may or may not be in the log
    violations: list[str] = field(default_factory=list)


class TopicWriter(threading.Thread):
    """Creates and deletes topics against the active controller until stopped.

    A create is acknowledged only by a 200 reply; anything else is refused or
    unknown. Each name is tried once (a retry after an ambiguous failure could
    not tell its own write from the first one). Only acknowledged topics are deleted,
    each once, so an UNKNOWN_TOPIC_OR_PARTITION reply to that first delete means an
    acknowledged create was lost: a violation.
    """

    def __init__(self, cluster: LocalCluster, seed: int, max_live: int = 150) -> None:
        super().__init__(name="chaos-writer", daemon=True)
        self.cluster = cluster
        self.rng = random.Random(seed)
        self.max_live = max_live
        self.stop_event = threading.Event()
        self.log = WriterLog()
        self._url: str | None = None
        self._live: list[str] = []  # acknowledged, not yet deleted
        self._n = 0
        self.error: BaseException | None = None

    def call(
        self, method: str, path: str, body: Any = None, timeout: float = 8.0, stoppable: bool = True
    ) -> tuple:
        """('ok', reply) | ('error', code) | ('unknown', why), within `timeout` seconds.

        NOT_CONTROLLER is followed to the hinted leader and retried, but it is also the
        answer to a write that was appended and then lost leadership before commit, so
        after one the outcome of an error reply is unknown (a retried create may meet
        its own first attempt as TOPIC_ALREADY_EXISTS). A timeout or reset is unknown;
        only a refused connection is retried as surely not received."""
        deadline = time.monotonic() + timeout
        urls = self.cluster.controller_urls
        attempt = 0
        ambiguous = False
        while time.monotonic() < deadline and not (stoppable and self.stop_event.is_set()):
            url = self._url or urls[attempt % len(urls)]
            attempt += 1
            left = deadline - time.monotonic()
            try:
                status, out = http_json(
                    method,
                    url + path,
                    body,
                    timeout=max(0.5, min(5.0, left)),
                    security=self.cluster.security,
                )
            except ConnectionRefusedError:
                self._url = None
                time.sleep(0.05)
                continue
            except OSError as e:  # timed out or reset: the request may have been applied
                self._url = None
                return ("unknown", str(e))
            if 200 <= status < 300:
                self._url = url
                return ("ok", out)
            code = out.get("error_code") if isinstance(out, dict) else None
            if status == 503 and code == "NOT_CONTROLLER":
                ambiguous = True
                self._url = None
                leader = out.get("leader_id")
                if isinstance(leader, int) and 1 <= leader <= len(urls) and urls[leader - 1] != url:
                    self._url = urls[leader - 1]
                else:
                    time.sleep(0.1)
                continue
            if ambiguous or status >= 500:
                return ("unknown", f"HTTP {status} {code}")
            return ("error", code or f"HTTP {status} {out}")
        return ("unknown", "deadline")

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                if self._live and (len(self._live) >= self.max_live or self.rng.random() < 0.4):
                    self._delete_one()
                else:
                    self._create_one()
                self.stop_event.wait(self.rng.uniform(0.02, 0.15))
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def _create_one(self) -> None:
        self._n += 1
        name = f"chaos-{self._n}"
        body = {
            "name": name,
            "partitions": self.rng.randint(1, 3),
            "replication_factor": self.rng.randint(1, 3),
        }
        kind, out = self.call("POST", "/v1/topics", body)
        if kind == "ok":
            self.log.acked_creates[name] = out["topic_id"]
            self._live.append(name)
        elif kind == "error":
            self.log.refused += 1
        else:
            self.log.unknown += 1

    def _delete_one(self) -> None:
        name = self._live.pop(self.rng.randrange(len(self._live)))
        kind, out = self.call("DELETE", f"/v1/topics/{name}")
        if kind == "ok":
            if out.get("topic_id") != self.log.acked_creates[name]:
                self.log.violations.append(
                    f"delete of {name} answered topic_id {out.get('topic_id')}, "
                    f"created as {self.log.acked_creates[name]}"
                )
            self.log.acked_deletes[name] = self.log.acked_creates[name]
        elif kind == "error":
            self.log.refused += 1
            if out == "UNKNOWN_TOPIC_OR_PARTITION":
                self.log.violations.append(f"acknowledged topic {name} unknown at its delete")
        else:
            self.log.unknown += 1
            self.log.unknown_deletes[name] = self.log.acked_creates[name]

    def stop(self, timeout: float = 15.0) -> None:
        self.stop_event.set()
        self.join(timeout)


# ------------------------------------------------------------- the watcher


class QuorumWatcher(threading.Thread):
    """Samples /v1/quorum of every controller; epoch -> the set of leaders seen."""

    def __init__(self, cluster: LocalCluster, interval: float = 0.3) -> None:
        super().__init__(name="chaos-watcher", daemon=True)
        self.cluster = cluster
        self.interval = interval
        self.stop_event = threading.Event()
        self.leaders: dict[int, set[int]] = {}
        self.samples = 0

    def run(self) -> None:
        while not self.stop_event.wait(self.interval):
            for n in self.cluster.controllers:
                q = self.cluster.quorum(n.node_id, timeout=1.0)
                if q is None:
                    continue
                self.samples += 1
                if q.get("leader_id") is not None:
                    self.leaders.setdefault(q["leader_epoch"], set()).add(q["leader_id"])

    def stop(self) -> None:
        self.stop_event.set()
        self.join(5)


# --------------------------------------------------------------- the faults


class FaultInjector:
    """Seeded faults with scheduled recoveries; at most one controller and two brokers
    are down, stopped or isolated at a time (so the quorum can make progress between
    faults), while single link cuts come on top."""

    def __init__(
        self,
        chaos: ChaosCluster,
        rng: random.Random,
        t0: float,
        rotation: CredentialRotation | None = None,
        rotate_every_s: float = 8.0,
    ) -> None:
        self.chaos = chaos
        self.cluster = chaos.cluster
        self.rng = rng
        self.t0 = t0
        self.rotation = rotation
        self.rotate_every_s = rotate_every_s
        self._last_rotation = time.monotonic()
        self.pending: list[tuple[float, str, Any]] = []  # (due, action, arg)
        self.faulted: set[int] = set()
        self.counts: dict[str, int] = {}
        self.events: list[str] = []

    def say(self, text: str) -> None:
        line = f"[chaos {now_s(self.t0)}] {text}"
        self.events.append(line)
        print(line, flush=True)

    def _count(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def cut_links(self) -> set[str]:
        return {
            link for _t, action, arg in self.pending if action == "heal" for link in arg["links"]
        }

    def recover_due(self, now: float) -> None:
        due = [p for p in self.pending if p[0] <= now]
        self.pending = [p for p in self.pending if p[0] > now]
        for _t, action, arg in due:
            self._recover(action, arg)

    def _recover(self, action: str, arg: Any) -> None:
        c = self.cluster
        if action == "restart":
            node = c.nodes[arg]
            if not node.alive():
                c.start(arg)
                self.say(f"restart {node.name} (pid {node.pid})")
            self.faulted.discard(arg)
        elif action == "cont":
            c.resume(arg)
            self.say(f"SIGCONT {c.nodes[arg].name}")
            self.faulted.discard(arg)
        elif action == "heal":
            for link in arg["links"]:
                self.chaos.proxy.set_mode(link, "pass")
            self.say(f"heal links {','.join(arg['links'])}")
            if arg.get("node") is not None:
                self.faulted.discard(arg["node"])

    def _maybe_rotate(self) -> bool:
        """Secured runs: a rotation step every `rotate_every_s` (instead of that turn's
        random fault), so each run goes through whole rotations."""
        if self.rotation is None or time.monotonic() - self._last_rotation < self.rotate_every_s:
            return False
        paused = any(action == "cont" for _t, action, _arg in self.pending)
        said = self.rotation.next_step(paused)
        if said is None:
            return False
        self._last_rotation = time.monotonic()
        self._count("rotate")
        self.say(said)
        return True

    def inject(self) -> None:
        if self._maybe_rotate():
            return
        rng, c = self.rng, self.cluster
        kinds = ["kill9", "pause", "restart", "isolate", "cut_link"]
        kind = rng.choices(kinds, weights=[3, 2, 2, 1, 2])[0]
        if kind == "cut_link":
            free = sorted(set(self.chaos.proxy.links) - self.cut_links())
            if not free:
                return
            link = rng.choice(free)
            mode = rng.choice(["blackhole", "reset"])
            self.chaos.proxy.set_mode(link, mode)
            dur = rng.uniform(1.0, 6.0)
            self.pending.append((time.monotonic() + dur, "heal", {"links": [link]}))
            self._count("cut_link")
            self.say(f"cut link {link} ({mode}) for {dur:.1f}s")
            return
        ctrl_faulted = any(c.nodes[n].role == "controller" for n in self.faulted)
        brokers_faulted = sum(1 for n in self.faulted if c.nodes[n].role == "broker")
        if kind == "isolate":
            candidates = [] if ctrl_faulted else [n.node_id for n in c.controllers]
        else:
            candidates = [n.node_id for n in c.brokers if n.node_id not in self.faulted]
            if brokers_faulted >= 2:
                candidates = []
            if not ctrl_faulted and rng.random() < 0.4:
                candidates = [n.node_id for n in c.controllers]
        candidates = [n for n in candidates if c.nodes[n].alive() and n not in self.faulted]
        if not candidates:
            return
        nid = rng.choice(candidates)
        node = c.nodes[nid]
        if kind == "isolate":
            links = self.chaos.links_of(nid)
            for link in links:
                self.chaos.proxy.set_mode(link, "blackhole")
            dur = rng.uniform(2.0, 8.0)
            self.faulted.add(nid)
            self.pending.append((time.monotonic() + dur, "heal", {"links": links, "node": nid}))
            self.say(f"isolate {node.name} for {dur:.1f}s")
        elif kind == "kill9":
            c.kill9(nid)
            dur = rng.uniform(0.5, 8.0)
            self.faulted.add(nid)
            self.pending.append((time.monotonic() + dur, "restart", nid))
            self.say(f"kill -9 {node.name}; restart in {dur:.1f}s")
        elif kind == "pause":
            c.pause(nid)
            dur = rng.uniform(0.5, 9.0)
            self.faulted.add(nid)
            self.pending.append((time.monotonic() + dur, "cont", nid))
            self.say(f"SIGSTOP {node.name} for {dur:.1f}s")
        else:
            code = c.terminate(nid, timeout=20)
            c.start(nid)
            self.say(f"graceful restart of {node.name} (exit {code}, new pid {node.pid})")
        self._count(kind)

    def kill_leader(self) -> bool:
        """kill -9 the Raft leader, restarted a few seconds later; False when no leader
        is known or a controller is already down. A short run's random faults can miss
        the leader altogether, and a run without a failover would test little."""
        c = self.cluster
        q = c.leader()
        if q is None or any(c.nodes[n].role == "controller" for n in self.faulted):
            return False
        nid = q["node_id"]
        c.kill9(nid)
        dur = self.rng.uniform(1.0, 4.0)
        self.faulted.add(nid)
        self.pending.append((time.monotonic() + dur, "restart", nid))
        self._count("kill9")
        self.say(f"kill -9 the leader {c.nodes[nid].name} (no failover yet); restart in {dur:.1f}s")
        return True

    def heal(self) -> None:
        """Undo every fault now: SIGCONT, heal every link, restart whatever is down."""
        for nid in list(self.cluster.nodes):
            self.cluster.resume(nid)
        self.chaos.proxy.heal_all()
        for nid, node in self.cluster.nodes.items():
            if not node.alive():
                self.cluster.start(nid)
        self.pending.clear()
        self.faulted.clear()
        self.say("healed: every process running and continued, every link passing")


def http_get(url: str, timeout: float = 3.0, security: ClientSecurity = NONE) -> tuple[int, Any]:
    return http_json("GET", url, timeout=timeout, security=security)


# ------------------------------------------------------------ credential rotation


def _age_s(pid: int) -> float:
    """How long ago process `pid` started (from /proc; 0 if it cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


class CredentialRotation:
    """The README's rotation recipe as a chaos fault, one step per call.

    A step that stops trusting old material (dropping the old CA or the old token
    hashes) waits while a process is SIGSTOPped: a paused process cannot reload, as a
    node that missed a whole rotation would not in production either. The test's own
    admin client reloads with every step."""

    STEPS = ("rotate-ca start", "renew all --new-token", "rotate-ca finish", "drop-old-tokens")

    def __init__(self, cluster: LocalCluster, rng: random.Random) -> None:
        assert cluster.spec.certs_dir is not None
        self.cluster = cluster
        self.certs = cluster.spec.certs_dir
        self.rng = rng
        self.step = 0
        self.done: list[str] = []
        self._own = Reloader([cluster.security], 0, who="chaos-test")

    def next_step(self, paused: bool) -> str | None:
        """Run the next step (None: it waits for a paused process)."""
        name = self.STEPS[self.step % len(self.STEPS)]
        if paused and name in ("rotate-ca finish", "drop-old-tokens"):
            return None
        if name == "rotate-ca start":
            C.rotate_ca_start(self.certs)
        elif name == "renew all --new-token":
            C.renew(self.certs, ["all"], new_token=True)
        elif name == "rotate-ca finish":
            C.rotate_ca_finish(self.certs)
        else:
            C.drop_old_tokens(self.certs)
        self.step += 1
        assert self._own.reload() == 0, "the test's own client could not reload"
        # not a process that may not have installed its handler yet: SIGHUP's default
        # action ends a process
        hup = [
            n
            for n in self.cluster.nodes.values()
            if n.alive() and self.rng.random() < 0.5 and _age_s(n.popen.pid) > 5.0  # type: ignore[union-attr]
        ]
        for n in hup:
            assert n.popen is not None
            os.kill(n.popen.pid, signal.SIGHUP)  # a process this cluster started
        self.done.append(name)
        return f"rotate credentials: {name}; SIGHUP {','.join(n.name for n in hup) or 'none'} (the rest poll)"
