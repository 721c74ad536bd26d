"""3 `kraft controller` processes and 5 brokers played by plain HTTP clients (issue 4).

One quorum for the module; the tests run in file order:

1. five brokers register and heartbeat (each on its own thread, following
   NOT_CONTROLLER hints), all are unfenced, a topic is created;
2. one broker stops heartbeating: its FenceBrokerRecord is committed within the
   session timeout + 1 s of its last contact, and it leads nothing and is out of
   every ISR;
3. three stop at once: three fences, in last-contact order, and each fence's
   partition changes come before the next fence (checked on the committed log);
4. kill -9 of the active controller while a broker is silent: the new active
   controller fences it, and no broker that kept heartbeating is fenced;
5. duplicate registration, stale broker epoch, unknown topic and malformed
   bodies each get their error code and the HTTP status of DESIGN 1.2.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from metadata_log.image import MetadataImage
from metadata_log.records import FenceBrokerRecord, PartitionChangeRecord
from tests.integration.controller_procs import ControllerQuorum
from tests.integration.procs import ProcGroup, http, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.story, pytest.mark.timeout(120)]

SESSION_S = 3.0
HEARTBEAT_S = 0.5
BROKERS = (11, 12, 13, 14, 15)
TOPIC = "orders"
OVERRIDES = {
    "broker.session.timeout.ms": str(int(SESSION_S * 1000)),
    "broker.heartbeat.interval.ms": str(int(HEARTBEAT_S * 1000)),
}


class Brokers:
    """Brokers as plain HTTP clients: register, then heartbeat on a thread each.

    `silence(ids)` stops heartbeats at once (a heartbeat already in flight may
    still land; its send time is recorded as contact). `last_contact[id]` is the
    send time (time.monotonic) of the last heartbeat that was answered 200.
    """

    def __init__(self, q: ControllerQuorum) -> None:
        self.q = q
        self.epochs: dict[int, int] = {}
        self.incarnations: dict[int, str] = {}
        self.last_contact: dict[int, float] = {}
        self.fenced_reply: dict[int, bool] = {}
        self._silent: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._leader_url: str | None = None
        self.cluster_id = ""

    # ------------------------------------------------------------------ HTTP

    def call(
        self, method: str, path: str, body: Any = None, timeout: float = 5.0
    ) -> tuple[int, Any]:
        return self.q.call_active(method, path, body, timeout=timeout)

    def register_body(self, bid: int, incarnation: str) -> dict[str, Any]:
        return {
            "broker_id": bid,
            "cluster_id": self.cluster_id,
            "incarnation_id": incarnation,
            "listeners": [
                {
                    "name": "PLAINTEXT",
                    "host": "127.0.0.1",
                    "port": 9000 + bid,
                    "security_protocol": "PLAINTEXT",
                }
            ],
            "rack": None,
            "features": [],
        }

    def register(self, bid: int) -> None:
        inc = str(uuid.uuid4())
        status, body = self.call("POST", "/v1/brokers/register", self.register_body(bid, inc))
        assert status == 200, body
        self.incarnations[bid] = inc
        self.epochs[bid] = body["broker_epoch"]

    def heartbeat_body(self, bid: int) -> dict[str, Any]:
        return {
            "broker_id": bid,
            "broker_epoch": self.epochs[bid],
            # The registration offset is the epoch: reaching it unfences the broker.
            "current_metadata_offset": self.epochs[bid],
            "want_fence": False,
            "want_shutdown": False,
        }

    def _heartbeat_once(self, bid: int) -> None:
        urls = [self._leader_url] if self._leader_url else []
        urls += [self.q.url(i) for i in self.q.ids]
        for url in urls:
            if url is None:
                continue
            sent = time.monotonic()
            try:
                status, body = http(
                    "POST", url + "/v1/brokers/heartbeat", self.heartbeat_body(bid), timeout=1.0
                )
            except OSError:
                continue
            if status == 200:
                self._leader_url = url
                with self._lock:
                    self.last_contact[bid] = max(self.last_contact.get(bid, 0.0), sent)
                    self.fenced_reply[bid] = body["is_fenced"]
                return
            if status == 503 and isinstance(body, dict) and body.get("leader_url"):
                hint = body["leader_url"]
                if hint != url:
                    self._leader_url = hint
                    try:
                        sent = time.monotonic()
                        status, body = http(
                            "POST",
                            hint + "/v1/brokers/heartbeat",
                            self.heartbeat_body(bid),
                            timeout=1.0,
                        )
                    except OSError:
                        continue
                    if status == 200:
                        with self._lock:
                            self.last_contact[bid] = max(self.last_contact.get(bid, 0.0), sent)
                            self.fenced_reply[bid] = body["is_fenced"]
                        return
            if (
                status == 409
                and isinstance(body, dict)
                and body.get("error_code") == "STALE_BROKER_EPOCH"
            ):
                return

    def _loop(self, bid: int, phase: float) -> None:
        # A fixed schedule (not a sleep after each reply): the brokers' phases stay
        # apart however long a request takes, so their last contacts stay distinct.
        due = time.monotonic() + phase
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            with self._lock:
                silent = bid in self._silent
            if not silent:
                self._heartbeat_once(bid)
            due += HEARTBEAT_S
            due = max(due, time.monotonic())  # a late turn does not burst to catch up

    def start(self) -> None:
        for n, bid in enumerate(sorted(self.epochs)):
            # Spread the heartbeats over the interval: distinct last contacts.
            t = threading.Thread(
                target=self._loop, args=(bid, n * HEARTBEAT_S / len(self.epochs)), daemon=True
            )
            t.start()
            self._threads.append(t)

    def silence(self, *ids: int) -> None:
        with self._lock:
            self._silent.update(ids)

    def resume(self, *ids: int) -> None:
        with self._lock:
            self._silent.difference_update(ids)

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5)

    # --------------------------------------------------------------- views

    def view(self) -> dict[int, dict[str, Any]]:
        status, body = self.call("GET", "/v1/brokers")
        assert status == 200, body
        return {b["broker_id"]: b for b in body}

    def topic(self) -> dict[str, Any]:
        status, body = self.call("GET", f"/v1/topics/{TOPIC}")
        assert status == 200, body
        return body


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControllerQuorum, Brokers]]:
    group = ProcGroup()
    q = ControllerQuorum(tmp_path_factory.mktemp("controllers"), group, overrides=OVERRIDES)
    brokers = Brokers(q)
    try:
        q.start_all()
        wait_until(lambda: q.active(), 10.0, what="an active controller")
        brokers.cluster_id = q.leader()["cluster_id"]  # type: ignore[index]
        yield q, brokers
    finally:
        brokers.close()
        group.close()


def wait_fenced(brokers: Brokers, ids: set[int], timeout: float) -> dict[int, float]:
    """Poll the committed broker view; the time each of `ids` was first seen fenced."""
    seen: dict[int, float] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and set(seen) != ids:
        try:
            view = brokers.view()
        except AssertionError:
            time.sleep(0.05)
            continue
        now = time.monotonic()
        for bid in ids:
            if bid not in seen and view[bid]["fenced"]:
                seen[bid] = now
        time.sleep(0.03)
    assert set(seen) == ids, f"not fenced in {timeout}s: {ids - set(seen)}"
    return seen


def wait_unfenced(brokers: Brokers, ids: set[int], timeout: float = 10.0) -> None:
    wait_until(
        lambda: all(not b["fenced"] for bid, b in brokers.view().items() if bid in ids),
        timeout,
        what=f"brokers {sorted(ids)} unfenced",
    )


def partitions_led(topic: dict[str, Any], bid: int) -> list[int]:
    return [p["partition_id"] for p in topic["partitions"] if p["leader"] == bid]


def test_brokers_register_and_topic_created(env: tuple[ControllerQuorum, Brokers]) -> None:
    q, brokers = env
    for bid in BROKERS:
        brokers.register(bid)
    brokers.start()
    wait_unfenced(brokers, set(BROKERS))
    status, body = brokers.call(
        "POST", "/v1/topics", {"name": TOPIC, "partitions": 10, "replication_factor": 3}
    )
    assert status == 201, body
    topic = brokers.topic()
    assert len(topic["partitions"]) == 10
    assert all(p["leader"] in BROKERS and len(p["isr"]) == 3 for p in topic["partitions"])


def test_silent_broker_fenced_within_session(env: tuple[ControllerQuorum, Brokers]) -> None:
    q, brokers = env
    topic = brokers.topic()
    victim = max(BROKERS, key=lambda b: len(partitions_led(topic, b)))
    assert partitions_led(topic, victim)
    brokers.silence(victim)
    seen = wait_fenced(brokers, {victim}, SESSION_S + 5)
    delay = seen[victim] - brokers.last_contact[victim]
    assert delay <= SESSION_S + 1.0, delay
    topic = brokers.topic()
    assert partitions_led(topic, victim) == []
    assert all(victim not in p["isr"] for p in topic["partitions"])
    assert all(p["leader"] in p["isr"] for p in topic["partitions"])
    # and nobody else was fenced
    view = brokers.view()
    assert [b for b in BROKERS if view[b]["fenced"]] == [victim]
    brokers.resume(victim)
    wait_unfenced(brokers, {victim})


def test_three_silent_fenced_one_at_a_time(env: tuple[ControllerQuorum, Brokers]) -> None:
    q, brokers = env
    victims = (12, 13, 14)
    leader = q.leader()
    assert leader is not None
    # Silenced one heartbeat interval and more apart: their last contacts are
    # ordered by a margin no request latency under load can undo.
    for v in victims:
        brokers.silence(v)
        time.sleep(HEARTBEAT_S + 0.3)
    wait_fenced(brokers, set(victims), SESSION_S + 5)
    expected = sorted(victims, key=lambda b: brokers.last_contact[b])
    # The committed log of the active controller, replayed record by record.
    records = q.records(leader["node_id"])
    image = MetadataImage()
    fences: list[int] = []
    removed_since_fence: set[int] = set()
    for off, rec in records:
        if isinstance(rec, PartitionChangeRecord) and rec.isr is not None:
            t = image.topics.get(rec.topic_id)
            before = set(t.partitions[rec.partition_id].isr) if t else set()
            removed_since_fence |= before - set(rec.isr)
        if isinstance(rec, FenceBrokerRecord) and rec.id in victims:
            # This fence's partition changes came before it, after the previous fence,
            # and removed only this broker; it leads nothing when fenced.
            assert removed_since_fence <= {rec.id}, (rec.id, removed_since_fence)
            for t in image.topics.values():
                for p in t.partitions.values():
                    assert p.leader != rec.id
                    assert rec.id not in p.isr or list(p.isr) == [rec.id]
            fences.append(rec.id)
            removed_since_fence = set()
        if isinstance(rec, FenceBrokerRecord):
            removed_since_fence = set()
        image.replay(rec, off)
    assert fences[-3:] == expected, (fences, expected, brokers.last_contact)
    brokers.resume(*victims)
    wait_unfenced(brokers, set(victims))


def test_failover_while_broker_silent(env: tuple[ControllerQuorum, Brokers]) -> None:
    q, brokers = env
    victim = 15
    old = q.leader()
    assert old is not None
    brokers.silence(victim)
    q.procs[old["node_id"]].kill9()
    new_active = wait_until(
        lambda: q.active(exclude=old["node_id"]), 10.0, what="a new active controller"
    )
    assert new_active != old["node_id"]
    # The new controller counts every broker as just seen at activation: the silent
    # one is fenced about a session later, by it.
    wait_fenced(brokers, {victim}, 10.0 + SESSION_S)
    new = q.leader()
    assert new is not None and new["leader_epoch"] > old["leader_epoch"]
    view = brokers.view()
    assert [b for b in BROKERS if view[b]["fenced"]] == [victim]
    # the fence was written in the new leader's epoch
    fence_offsets = [
        off
        for off, rec in q.records(new["node_id"])
        if isinstance(rec, FenceBrokerRecord) and rec.id == victim
    ]
    batches = q.committed_batches(new["node_id"], new["high_watermark"])
    epoch_of = {
        off: epoch for base, epoch, _c, recs in batches for off in range(base, base + len(recs))
    }
    assert epoch_of[fence_offsets[-1]] == new["leader_epoch"]
    q.start(old["node_id"])

    # the restarted node serves again, and knows the leader (the next test may
    # take it as the follower that redirects), before the next test talks to it
    def following() -> bool:
        v, ld = q.quorum(old["node_id"]), q.leader()
        return v is not None and ld is not None and v["leader_id"] == ld["node_id"]

    wait_until(following, 15.0, what="the restarted controller following the leader")
    brokers.resume(victim)
    wait_unfenced(brokers, {victim})


def test_error_codes_and_statuses(env: tuple[ControllerQuorum, Brokers]) -> None:
    q, brokers = env
    # A second incarnation while the first's session is live.
    status, body = brokers.call(
        "POST", "/v1/brokers/register", brokers.register_body(11, str(uuid.uuid4()))
    )
    assert (status, body["error_code"]) == (409, "DUPLICATE_BROKER_REGISTRATION"), body
    # A heartbeat with a wrong epoch, and one from a broker that never registered.
    hb = {**brokers.heartbeat_body(11), "broker_epoch": brokers.epochs[11] - 1}
    status, body = brokers.call("POST", "/v1/brokers/heartbeat", hb)
    assert (status, body["error_code"]) == (409, "STALE_BROKER_EPOCH"), body
    hb = {**brokers.heartbeat_body(11), "broker_id": 99}
    status, body = brokers.call("POST", "/v1/brokers/heartbeat", hb)
    assert (status, body["error_code"]) == (409, "STALE_BROKER_EPOCH"), body
    # Unknown topic.
    status, body = brokers.call("GET", "/v1/topics/no-such-topic")
    assert (status, body["error_code"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION"), body
    status, body = brokers.call("DELETE", "/v1/topics/no-such-topic")
    assert (status, body["error_code"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION"), body
    # Malformed bodies: not JSON, a field missing, a field of the wrong type.
    active = q.active()
    assert active is not None
    url = q.url(active)
    status, body = http("POST", url + "/v1/brokers/register", b"{not json")
    assert (status, body["error_code"]) == (400, "INVALID_REQUEST"), body
    partial = brokers.register_body(16, str(uuid.uuid4()))
    del partial["incarnation_id"]
    status, body = http("POST", url + "/v1/brokers/register", partial)
    assert (status, body["error_code"]) == (400, "INVALID_REQUEST"), body
    assert "incarnation_id" in body["message"]
    status, body = http(
        "POST", url + "/v1/brokers/heartbeat", {**brokers.heartbeat_body(11), "broker_epoch": "x"}
    )
    assert (status, body["error_code"]) == (400, "INVALID_REQUEST"), body
    status, body = http("POST", url + "/raft/fetch", b"\xc1\xc1")
    assert (status, body["error_code"]) == (400, "INVALID_REQUEST"), body
    # A follower redirects.
    follower = next(i for i in q.ids if i != active and q.alive(i))
    status, body = http("POST", q.url(follower) + "/v1/topics", {"name": "x", "partitions": 1})
    assert status == 503 and body["error_code"] == "NOT_CONTROLLER", body
    assert body["leader_id"] == active and body["leader_url"] == url
    # No 500 anywhere in the controllers' logs.
    assert "Traceback" not in q.dump_logs()


def test_admin_cli_metadata_and_msgpack(
    env: tuple[ControllerQuorum, Brokers], capsys: pytest.CaptureFixture[str]
) -> None:
    """`kraft topics|brokers|elect` through a follower's URL (hints followed),
    GET /v1/metadata, and a msgpack round trip."""
    from kraft.cli import main

    q, brokers = env
    active = q.active()
    assert active is not None
    follower = next(i for i in q.ids if i != active and q.alive(i))
    boot = ["--bootstrap", q.url(follower)]

    def kraft(*args: str) -> str:
        capsys.readouterr()
        assert main([*args, *boot]) == 0, args
        return capsys.readouterr().out

    out = kraft(
        "topics", "create", "--topic", "cli", "--partitions", "3", "--replication-factor", "2"
    )
    assert "Created topic cli" in out and "3 partitions" in out
    assert kraft("topics", "list").split() == ["cli", TOPIC]
    kraft("topics", "add-partitions", "--topic", "cli", "--partitions", "4")
    out = kraft(
        "topics", "alter-configs", "--topic", "cli",
        "--add-config", "unclean.leader.election.enable=true",
    )  # fmt: skip
    assert '"unclean.leader.election.enable": "true"' in out
    out = kraft("topics", "describe", "--topic", "cli")
    assert "PartitionCount: 4" in out and "unclean.leader.election.enable=true" in out
    assert out.count("\tPartition: ") == 4
    out = kraft("elect", "--topic", "cli", "--partition", "0", "--type", "preferred")
    assert "leader" in out
    rows = kraft("brokers", "list").splitlines()[1:]
    assert [int(r.split()[0]) for r in rows] == list(BROKERS)
    assert all(r.split()[1] == "UNFENCED" for r in rows)
    # A broker that registered and never heartbeated is fenced: it may be unregistered;
    # a live one may not.
    status, body = brokers.call(
        "POST", "/v1/brokers/register", brokers.register_body(16, str(uuid.uuid4()))
    )
    assert status == 200, body
    assert "Unregistered broker 16" in kraft("brokers", "unregister", "--broker-id", "16")
    capsys.readouterr()
    assert main(["brokers", "unregister", "--broker-id", "11", *boot]) == 1
    err = capsys.readouterr().err
    assert "INVALID_REQUEST" in err and "live session" in err and "Traceback" not in err
    assert main(["topics", "describe", "--topic", "nope", *boot]) == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in capsys.readouterr().err
    kraft("topics", "delete", "--topic", "cli")

    # GET /v1/metadata: the whole committed image on the active controller.
    status, image = http("GET", q.url(active) + "/v1/metadata")
    assert status == 200, image
    assert [t["name"] for t in image["topics"]] == [TOPIC]
    assert {b["broker_id"] for b in image["brokers"]} == set(BROKERS)
    status, body = http("GET", q.url(follower) + "/v1/metadata")
    assert (status, body["error_code"], body["leader_id"]) == (503, "NOT_CONTROLLER", active)

    # msgpack in, msgpack out.
    import urllib.request

    import msgpack

    req = urllib.request.Request(
        q.url(active) + "/v1/brokers/heartbeat",
        data=msgpack.packb(brokers.heartbeat_body(11)),
        method="POST",
        headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"},
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.headers["Content-Type"].startswith("application/msgpack")
        reply = msgpack.unpackb(resp.read())
    assert reply["is_fenced"] is False and reply["should_shut_down"] is False
