"""KIP-853 with real `kraft controller` processes on 127.0.0.1 (issue 9).

One story, in order, while a writer keeps registering brokers through the
client API the whole time:

1. a single controller (`--voters 1@...`) elects itself;
2. controllers 2..5 start with `--bootstrap-controllers`, join as observers and
   are added one at a time with `kraft quorum add-controller`: 1 -> 3 -> 5 voters;
   `kraft quorum describe --replication` shows every voter's directory id;
3. a second change while one is pending is refused with 409
   CONCURRENT_VOTER_CHANGE (a removal that cannot commit while a majority is
   down is pending);
4. a voter's disk is wiped: it comes back (`--bootstrap-controllers`) with a new
   directory id as an observer; `remove-controller` of the old id+directory and
   `add-controller` of the new one replace it;
5. the leader is removed: it leads until the change commits, then hands over,
   and stays an observer;
6. no acknowledged write was lost: every broker the writer registered is in the
   final leader's image.

Every process is started here and killed by pid.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.procs import REPO, Proc, ProcGroup, free_ports, http, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

IDS = (1, 2, 3, 4, 5)
FAST = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
}


class Cluster:
    def __init__(self, tmp: Path, group: ProcGroup) -> None:
        self.tmp = tmp
        self.group = group
        self.ports = dict(zip(IDS, free_ports(len(IDS)), strict=True))
        self.procs: dict[int, Proc] = {}
        self.cluster_id: str | None = None

    def url(self, nid: int) -> str:
        return f"http://127.0.0.1:{self.ports[nid]}"

    def data_dir(self, nid: int) -> Path:
        return self.tmp / f"controller-{nid}"

    def start(self, nid: int, bootstrap: bool) -> None:
        args = ["-m", "kraft.cli", "controller", "--node-id", str(nid)]
        if bootstrap:
            args += [
                "--bootstrap-controllers", ",".join(self.url(n) for n in IDS if n != nid),
                "--listen", f"127.0.0.1:{self.ports[nid]}",
            ]  # fmt: skip
        else:
            args += ["--voters", f"1@127.0.0.1:{self.ports[1]}"]
        args += ["--data-dir", str(self.data_dir(nid)), "--log-format", "json"]
        for k, v in FAST.items():
            args += ["--override", f"{k}={v}"]
        n = sum(1 for p in self.group.procs if p.name == f"controller-{nid}")
        proc = Proc(f"controller-{nid}", args, self.tmp / "logs" / f"controller-{nid}.{n}.log")
        self.procs[nid] = self.group.start(proc)

    def quorum(self, nid: int) -> dict[str, Any] | None:
        p = self.procs.get(nid)
        if p is None or not p.alive():
            return None
        try:
            status, body = http("GET", self.url(nid) + "/v1/quorum", timeout=1.0)
        except OSError:
            return None
        return body if status == 200 and isinstance(body, dict) else None

    def leader(self) -> dict[str, Any] | None:
        best = None
        for nid in IDS:
            q = self.quorum(nid)
            if (
                q
                and q["state"] == "leader"
                and (best is None or q["leader_epoch"] > best["leader_epoch"])
            ):
                best = q
        return best

    def directory_id(self, nid: int) -> str:
        text = (self.data_dir(nid) / "meta.properties").read_text()
        return next(
            line.split("=", 1)[1] for line in text.splitlines() if line.startswith("directory.id=")
        )

    def call_leader(
        self, method: str, path: str, body: Any = None, timeout: float = 10.0
    ) -> tuple[int, Any]:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            ld = self.leader()
            if ld is None:
                time.sleep(0.05)
                continue
            try:
                status, out = http(method, self.url(ld["node_id"]) + path, body, timeout=5.0)
            except OSError as e:
                last = e
                time.sleep(0.05)
                continue
            if (
                status == 503
                and isinstance(out, dict)
                and out.get("error_code") == "NOT_CONTROLLER"
            ):
                last = out
                time.sleep(0.05)
                continue
            return status, out
        raise AssertionError(f"{method} {path}: no leader answered in {timeout}s ({last})")

    def kraft(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kraft.cli", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def bootstrap_arg(self) -> str:
        return ",".join(self.url(n) for n in IDS if n in self.procs and self.procs[n].alive())


class Writer(threading.Thread):
    """Registers brokers through the active controller until stopped; remembers the
    ids of the registrations that were acknowledged (committed)."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.acked: list[int] = []
        self.stop = threading.Event()
        self.next_id = 1000

    def run(self) -> None:
        while not self.stop.is_set():
            bid = self.next_id
            self.next_id += 1
            body = {
                "broker_id": bid,
                "cluster_id": self.cluster.cluster_id,
                "incarnation_id": str(uuid.uuid4()),
                "listeners": [
                    {"name": "PLAINTEXT", "host": "h", "port": 1, "security_protocol": "PLAINTEXT"}
                ],
                "rack": None,
                "features": [],
            }
            try:
                status, _ = self.cluster.call_leader(
                    "POST", "/v1/brokers/register", body, timeout=5.0
                )
            except AssertionError:
                continue
            if status == 200:
                self.acked.append(bid)
            time.sleep(0.02)

    def count(self) -> int:
        return len(self.acked)


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    group = ProcGroup()
    try:
        yield Cluster(tmp_path, group)
    finally:
        group.close()


def voters_of(view: dict[str, Any]) -> dict[int, str]:
    return {v["node_id"]: v.get("directory_id", "") for v in view["voters"]}


def wait_voters(c: Cluster, want: set[int], timeout: float = 20.0) -> dict[str, Any]:
    def ok() -> dict[str, Any] | None:
        ld = c.leader()
        if ld and set(voters_of(ld)) == want and all(voters_of(ld).values()):
            return ld
        return None

    return wait_until(ok, timeout, interval=0.1, what=f"voters {sorted(want)} with directory ids")


def add_controller(c: Cluster, nid: int) -> None:
    def observing() -> bool:
        ld = c.leader()
        return bool(ld) and any(
            o["node_id"] == nid and o.get("directory_id") == c.directory_id(nid)
            for o in ld["observers"]
        )

    wait_until(observing, 20.0, interval=0.1, what=f"controller {nid} fetching as an observer")
    r = c.kraft(
        "quorum", "add-controller", "--bootstrap", c.bootstrap_arg(),
        "--node-id", str(nid), "--directory-id", c.directory_id(nid), "--url", c.url(nid),
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"Added controller {nid}" in r.stdout


def test_grow_replace_and_remove_controllers_while_writes_continue(cluster: Cluster) -> None:
    c = cluster
    c.start(1, bootstrap=False)
    ld = wait_until(c.leader, 10.0, interval=0.05, what="the single controller leading")
    c.cluster_id = ld["cluster_id"]
    writer = Writer(c)
    writer.start()
    try:
        wait_until(lambda: writer.count() >= 5, 10.0, what="first writes")
        # ---- 1 -> 3 -> 5 voters
        for nid in (2, 3, 4, 5):
            c.start(nid, bootstrap=True)
        for nid in (2, 3, 4, 5):
            before = writer.count()
            add_controller(c, nid)
            wait_until(lambda b=before: writer.count() > b, 10.0, what="writes after the add")
        ld = wait_voters(c, {1, 2, 3, 4, 5})
        assert voters_of(ld) == {n: c.directory_id(n) for n in IDS}
        r = c.kraft("quorum", "describe", "--replication", "--bootstrap", c.url(1))
        assert r.returncode == 0, r.stderr
        for n in IDS:
            assert c.directory_id(n) in r.stdout, r.stdout

        # ---- a second change while one is pending: refused
        lid = ld["node_id"]
        down = [n for n in IDS if n != lid][:3]
        # All three at once, then reaped: the removal below must come while the
        # leader still counts them as fetching (within the 1 s fetch timeout).
        for n in down:
            os.kill(c.procs[n].pid, signal.SIGKILL)
        for n in down:
            c.procs[n].kill9()
        victim = down[0]
        status, body = http(
            "DELETE",
            f"{c.url(lid)}/v1/quorum/voters/{victim}?directory_id={c.directory_id(victim)}&timeout_ms=300",
            timeout=5.0,
        )
        assert status == 504 and body["error_code"] == "REQUEST_TIMED_OUT", body
        status, body = http(
            "DELETE",
            f"{c.url(lid)}/v1/quorum/voters/{down[1]}?directory_id={c.directory_id(down[1])}",
            timeout=5.0,
        )
        assert status == 409 and body["error_code"] == "CONCURRENT_VOTER_CHANGE", body
        assert "one change at a time" in body["message"]
        for n in down:
            c.start(n, bootstrap=True)
        # The pending removal commits once a majority is back (or a new leader
        # truncates it): either way the quorum settles, with or without it.

        def settled() -> dict[str, Any] | None:
            q = c.leader()
            if q is None:
                return None
            s, _ = http("GET", c.url(q["node_id"]) + "/v1/brokers", timeout=2.0)
            return q if s == 200 else None

        wait_until(settled, 30.0, interval=0.1, what="an active controller again")
        ld = c.leader()
        assert ld is not None
        if victim not in voters_of(ld):
            add_controller(c, victim)
        ld = wait_voters(c, {1, 2, 3, 4, 5}, 30.0)

        # ---- replace a voter whose disk was wiped
        lid = ld["node_id"]
        wiped = next(n for n in IDS if n != lid)
        old_dir = c.directory_id(wiped)
        c.procs[wiped].kill9()
        shutil.rmtree(c.data_dir(wiped))
        c.start(wiped, bootstrap=True)
        wait_until(lambda: (c.data_dir(wiped) / "meta.properties").exists(), 10.0, what="re-format")
        new_dir = c.directory_id(wiped)
        assert new_dir != old_dir
        before = writer.count()
        r = c.kraft(
            "quorum", "remove-controller", "--bootstrap", c.bootstrap_arg(),
            "--node-id", str(wiped), "--directory-id", old_dir,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        add_controller(c, wiped)
        ld = wait_voters(c, {1, 2, 3, 4, 5})
        assert voters_of(ld)[wiped] == new_dir
        wait_until(lambda: writer.count() > before, 10.0, what="writes after the replacement")

        # ---- remove the leader
        lid = ld["node_id"]
        before = writer.count()
        r = c.kraft(
            "quorum", "remove-controller", "--bootstrap", c.bootstrap_arg(),
            "--node-id", str(lid), "--directory-id", c.directory_id(lid),
        )  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        rest = set(IDS) - {lid}
        ld = wait_voters(c, rest)
        assert ld["node_id"] != lid
        wait_until(lambda: writer.count() > before + 3, 15.0, what="writes under the new leader")
        wait_until(
            lambda: (q := c.quorum(lid)) is not None and q["state"] == "observer",
            10.0,
            what="the removed leader observing",
        )
    finally:
        writer.stop.set()
        writer.join(10)
    # ---- no acknowledged write was lost
    status, brokers = c.call_leader("GET", "/v1/brokers")
    assert status == 200, brokers
    registered = {b["broker_id"] for b in brokers}
    missing = set(writer.acked) - registered
    assert not missing, f"acknowledged registrations lost: {sorted(missing)[:20]}"
    assert len(writer.acked) > 30
