"""Kafka-style configuration: a properties file, then `--override key=value`.

Names and defaults are Kafka's where Kafka has one. Each process declares the
keys it uses; a key it does not use is reported as unused (logged, not an
error), as Kafka's AbstractConfig.logUnused does; a bad value is a ConfigError
that names the key.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A configuration problem, naming the key or the file and line."""


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: str  # "int" | "bool" | "str" | "voters"
    default: Any
    doc: str
    validator: Callable[[Any], str | None] | None = None  # returns an error message or None


def at_least(lo: int) -> Callable[[Any], str | None]:
    return lambda v: None if v >= lo else f"must be >= {lo}"


def _per_ip_overrides_problem(text: str) -> str | None:
    from kraft.server.connection_quotas import QuotaConfigError, parse_per_ip_overrides

    try:
        parse_per_ip_overrides(text)
    except QuotaConfigError as e:
        return f"is invalid: {e}"
    return None


def parse_voters(text: str) -> dict[int, tuple[str, int]]:
    """`1@host:port,2@host:port` -> {1: (host, port), ...}."""
    voters: dict[int, tuple[str, int]] = {}
    if not text.strip():
        raise ConfigError("the voter list is empty")
    for item in (x.strip() for x in text.split(",")):
        if not item:
            raise ConfigError(f"the voter list {text!r} has an empty entry")
        try:
            node, address = item.split("@", 1)
            host, port = address.rsplit(":", 1)
            node_id, port_no = int(node), int(port)
        except ValueError:
            raise ConfigError(f"voter {item!r} is not of the form ID@HOST:PORT") from None
        if not 0 <= node_id < 2**31 or not 0 < port_no < 65536:
            raise ConfigError(f"voter {item!r} has a bad id or port")
        host = host.strip("[]")
        if not host:
            raise ConfigError(f"voter {item!r} has no host")
        if node_id in voters:
            raise ConfigError(f"voter id {node_id} appears twice")
        for other, address in voters.items():
            if address == (host, port_no):
                raise ConfigError(
                    f"voters {other} and {node_id} have the same address {host}:{port_no}"
                )
        voters[node_id] = (host, port_no)
    return voters


_MS = "ms"
KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        ConfigKey(
            "node.id",
            "int",
            None,
            "this node's id (controllers and brokers share one namespace)",
            at_least(0),
        ),
        ConfigKey("controller.quorum.voters", "voters", None, "the voters: ID@HOST:PORT,..."),
        ConfigKey(
            "controller.quorum.election.timeout.ms",
            "int",
            1000,
            "election timeout T (randomized in [T, 2T])",
            at_least(1),
        ),
        ConfigKey(
            "controller.quorum.fetch.timeout.ms",
            "int",
            2000,
            "no leader contact for this long starts an election",
            at_least(1),
        ),
        ConfigKey(
            "controller.quorum.election.backoff.max.ms",
            "int",
            1000,
            "max backoff before a new election",
            at_least(0),
        ),
        ConfigKey(
            "controller.quorum.request.timeout.ms",
            "int",
            2000,
            "timeout of one Raft RPC",
            at_least(1),
        ),
        ConfigKey(
            "controller.quorum.fetch.max.wait.ms",
            "int",
            500,
            "how long the leader parks a Fetch (long poll)",
            at_least(0),
        ),
        ConfigKey(
            "controller.quorum.high.watermark.linger.ms",
            "int",
            1,
            "how long the leader holds a moved high watermark for new data to ride with it",
            at_least(0),
        ),
        ConfigKey(
            "broker.heartbeat.interval.ms", "int", 2000, "broker heartbeat interval", at_least(1)
        ),
        ConfigKey(
            "broker.session.timeout.ms",
            "int",
            9000,
            "no heartbeat for this long fences a broker",
            at_least(1),
        ),
        ConfigKey(
            "unclean.leader.election.enable",
            "bool",
            False,
            "cluster default for unclean leader election",
        ),
        ConfigKey(
            "min.insync.replicas",
            "int",
            1,
            "cluster default of the topic config: an ISR below it keeps eligible leader "
            "replicas (KIP-966)",
            at_least(1),
        ),
        ConfigKey(
            "auto.leader.rebalance.enable",
            "bool",
            True,
            "the active controller moves leadership back to preferred replicas by itself",
        ),
        ConfigKey(
            "leader.imbalance.check.interval.seconds",
            "int",
            300,
            "how often the active controller looks for imbalanced partition leaders",
            at_least(1),
        ),
        ConfigKey(
            "leader.imbalance.max.elections.per.batch",
            "int",
            1000,
            "preferred-leader elections per balancing batch (Kafka's fixed "
            "MAX_ELECTIONS_PER_IMBALANCE); a check runs batches until none is left",
            at_least(1),
        ),
        ConfigKey(
            "eligible.leader.replicas.version",
            "int",
            1,
            "the KIP-966 feature level a new cluster bootstraps with (0 turns eligible "
            "leader replicas off, as kafka-storage format --feature); an existing log "
            "keeps its own level",
            lambda v: None if v in (0, 1) else "must be 0 or 1",
        ),
        ConfigKey(
            "metadata.max.idle.interval.ms",
            "int",
            500,
            "the active controller writes a NoOpRecord this often",
            at_least(0),
        ),
        ConfigKey(
            "metadata.log.max.record.bytes.between.snapshots",
            "int",
            20 * 1024 * 1024,
            "snapshot after this many bytes of new records",
            at_least(1),
        ),
        ConfigKey(
            "metadata.log.max.snapshot.interval.ms",
            "int",
            3_600_000,
            "snapshot at least this often (0: never by time)",
            at_least(0),
        ),
        ConfigKey(
            "metadata.log.segment.bytes",
            "int",
            1024 * 1024 * 1024,
            "segment size before rolling",
            at_least(4096),
        ),
        ConfigKey(
            "metadata.max.retention.bytes",
            "int",
            100 * 1024 * 1024,
            "delete segments below the snapshot beyond this size (-1: no limit)",
            at_least(-1),
        ),
        ConfigKey(
            "metadata.max.retention.ms",
            "int",
            7 * 24 * 3_600_000,
            "delete segments below the snapshot older than this (-1: no limit)",
            at_least(-1),
        ),
        ConfigKey("metadata.log.dir", "str", None, "the data directory"),
        ConfigKey(
            "request.timeout.ms",
            "int",
            30_000,
            "deadline of a client request at the controller",
            at_least(1),
        ),
        ConfigKey(
            "controller.event.queue.size",
            "int",
            10_000,
            "bounded event queue of the controller",
            at_least(1),
        ),
        ConfigKey(
            "max.request.bytes",
            "int",
            10 * 1024 * 1024,
            "largest accepted request body (413 beyond)",
            at_least(1024),
        ),
        # ---- security and limits (issue 8; README "Security")
        ConfigKey(
            "ssl.keystore.location",
            "str",
            None,
            "PEM file with this node's certificate chain and private key: the listener "
            "speaks TLS (https) when set; clients present it for mTLS",
        ),
        ConfigKey(
            "ssl.truststore.location",
            "str",
            None,
            "PEM file with the CA certificate(s) that sign the other nodes' certificates",
        ),
        ConfigKey(
            "ssl.client.auth",
            "str",
            "none",
            "client certificates at the listener: required, requested or none",
            lambda v: (
                None
                if v in ("required", "requested", "none")
                else "must be one of required, requested, none"
            ),
        ),
        ConfigKey(
            "authorizer.enable",
            "bool",
            False,
            "authenticate every request (mTLS certificate or token) and authorize it",
        ),
        ConfigKey(
            "super.users",
            "str",
            "User:admin",
            "principals allowed admin operations (Kafka's form: User:admin;User:ops)",
        ),
        ConfigKey(
            "authentication.credentials.file",
            "str",
            None,
            "the controller's principal=salted-hash lines for token authentication",
        ),
        ConfigKey(
            "authentication.token.file",
            "str",
            None,
            "this process's own token (one line principal:secret) sent to controllers",
        ),
        ConfigKey(
            "authentication.max.verification.rate",
            "int",
            500,
            "tokens not seen before that a controller checks per second (each costs a "
            "PBKDF2); beyond it a new token is refused (401, retry later) without hashing, "
            "so forged tokens cannot take the event loop; known tokens are never held up",
            at_least(1),
        ),
        ConfigKey(
            "security.reload.interval.ms",
            "int",
            10_000,
            "how often the keystore, truststore, credentials and token files are checked "
            "for changes and reloaded without a restart (0: only on SIGHUP)",
            at_least(0),
        ),
        ConfigKey(
            "max.connections",
            "int",
            1000,
            "open connections a controller listener holds: at the limit a newcomer closes "
            "the oldest connection that has not completed a request head; refused only "
            "when every connection has",
            at_least(1),
        ),
        # ---- connection limits (issue 25; kraft/server/connection_quotas.py)
        ConfigKey(
            "max.connections.per.ip",
            "int",
            200,
            "open connections one host may hold on a controller listener (more are "
            "refused at once); the voters' hosts are exempt. Kafka's default is unlimited: "
            "200 leaves a fleet simulator's pool (~100) room, and takes 5 hosts to fill "
            "max.connections",
            at_least(1),
        ),
        ConfigKey(
            "max.connections.per.ip.overrides",
            "str",
            "",
            "per-host exceptions to max.connections.per.ip, Kafka's form host:count,host:count",
            _per_ip_overrides_problem,
        ),
        ConfigKey(
            "max.connection.creation.rate",
            "int",
            500,
            "new connections a controller listener admits per second (KIP-612; Kafka's "
            "default is unlimited): more wait for their turn, hosts taking turns, up to "
            "connections.request.head.timeout.ms; the voters' hosts are exempt. 500/s lets "
            "1,000 brokers reconnect to a new active controller in 2 s",
            at_least(1),
        ),
        ConfigKey(
            "connections.request.head.timeout.ms",
            "int",
            10_000,
            "a new connection must complete its TLS handshake and its first request head "
            "within this; a connection that has not completed a request head is also the "
            "first closed to make room for a newcomer at max.connections",
            at_least(100),
        ),
        ConfigKey(
            "controller.heartbeat.front.enable",
            "bool",
            True,
            "answer heartbeat-only connections in a lean HTTP/1.1 front ahead of aiohttp "
            "(kraft/server/heartbeat_front.py)",
        ),
        ConfigKey(
            "connections.max.idle.ms",
            "int",
            60_000,
            "close a connection idle this long, or whose request (headers or body) is "
            "not fully received within it",
            at_least(100),
        ),
        ConfigKey(
            "max.partitions.per.topic",
            "int",
            10_000,
            "largest partition count of one topic (create / add partitions): POLICY_VIOLATION beyond",
            at_least(1),
        ),
        ConfigKey(
            "max.topics",
            "int",
            100_000,
            "largest number of topics in the cluster: POLICY_VIOLATION beyond",
            at_least(1),
        ),
        ConfigKey(
            "replica.fetch.response.max.bytes",
            "int",
            10 * 1024 * 1024,
            "server-side cap on a Fetch's / FetchSnapshot's max_bytes",
            at_least(1024),
        ),
        ConfigKey("broker.rack", "str", None, "the broker's rack"),
        ConfigKey(
            "controlled.shutdown.timeout.ms",
            "int",
            30_000,
            "how long a broker waits for its controlled shutdown",
            at_least(0),
        ),
        ConfigKey(
            "broker.isr.expansion.enable",
            "bool",
            True,
            "partition leaders add caught-up followers back to the ISR",
        ),
        ConfigKey(
            "broker.simulated.lag.probability",
            "str",
            "0",
            "per-check probability that a follower lags out of the ISR (0 to 1)",
        ),
    ]
}


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """java.util.Properties subset: `key=value` or `key: value`, `#`/`!` comments,
    trailing-backslash continuation lines."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        lineno = i + 1
        line = lines[i].strip()
        i += 1
        while line.endswith("\\") and i < len(lines):
            line = line[:-1] + lines[i].strip()
            i += 1
        if not line or line[0] in "#!":
            continue
        for sep in ("=", ":"):
            if sep in line:
                key, value = line.split(sep, 1)
                break
        else:
            raise ConfigError(f"{source}:{lineno}: expected key=value, got {line!r}")
        key = key.strip()
        if not key:
            raise ConfigError(f"{source}:{lineno}: empty key")
        out[key] = value.strip()
    return out


def _convert(key: ConfigKey, raw: str) -> Any:
    if key.type == "int":
        try:
            value: Any = int(raw.strip())
        except ValueError:
            raise ConfigError(f"{key.name}: {raw!r} is not an integer") from None
    elif key.type == "bool":
        low = raw.strip().lower()
        if low not in ("true", "false"):
            raise ConfigError(f"{key.name}: {raw!r} is not true or false")
        value = low == "true"
    elif key.type == "voters":
        try:
            value = parse_voters(raw)
        except ConfigError as e:
            raise ConfigError(f"{key.name}: {e}") from None
    else:
        value = raw
    if key.validator is not None:
        problem = key.validator(value)
        if problem:
            raise ConfigError(f"{key.name}: {raw!r} {problem}")
    return value


def default_of(name: str) -> Any:
    """The registry's default for a key: the one place a default is stated (typed
    configs such as RaftConfig and ControllerConfig take their defaults from here)."""
    return KEYS[name].default


def value_of(config: Config | None, name: str) -> Any:
    """A key's configured value, else the registry's default (no config loaded, as
    in tests and the simulator, means every default)."""
    v = None if config is None else config.get(name)
    return KEYS[name].default if v is None else v


class Config:
    """Typed values for the keys a process uses; others are kept as unused."""

    def __init__(self, values: Mapping[str, Any], unused: Iterable[str]) -> None:
        self._values = dict(values)
        self.unused = sorted(unused)

    def log_unused(self, log: logging.Logger) -> None:
        """A warning per key no kraft process knows, most likely a typo (Kafka
        warns: "supplied but isn't a known config"); an info line per key that
        belongs to another role (one properties file may serve both)."""
        for key in self.unused:
            if key in KEYS:
                log.info(
                    "configuration key %s is not used by this process",
                    key,
                    extra={"event": "config_unused", "key": key},
                )
            else:
                log.warning(
                    "unknown configuration key %s (a typo?): it is ignored",
                    key,
                    extra={"event": "config_unknown", "key": key},
                )

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def get(self, name: str, default: Any = None) -> Any:
        v = self._values.get(name)
        return default if v is None else v

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)


def load_config(
    used_keys: Iterable[str],
    config_file: str | None = None,
    overrides: Iterable[str] = (),
    explicit: Mapping[str, Any] | None = None,
) -> Config:
    """Defaults, then the file, then `--override key=value`, then explicit flags
    (a command-line flag like --node-id wins, as the flag is the more specific)."""
    used = set(used_keys)
    raw: dict[str, str] = {}
    if config_file is not None:
        path = Path(config_file)
        try:
            text = path.read_text()
        except OSError as e:
            raise ConfigError(f"cannot read config file {config_file}: {e.strerror}") from None
        raw.update(parse_properties(text, str(path)))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--override {item!r}: expected key=value")
        k, v = item.split("=", 1)
        raw[k.strip()] = v.strip()
    values: dict[str, Any] = {name: KEYS[name].default for name in used}
    unused = []
    for k, v in raw.items():
        if k not in used:
            unused.append(k)
            continue
        values[k] = _convert(KEYS[k], v)
    for k, v in (explicit or {}).items():
        if v is not None:
            values[k] = v
    return Config(values, unused)


# What every client of a controller (broker agents, admin tools, controllers as
# Raft peers) reads to reach a secured listener.
SECURITY_KEYS = (
    "ssl.keystore.location",
    "ssl.truststore.location",
    "authentication.token.file",
)

CONTROLLER_KEYS = (
    "node.id",
    "controller.quorum.voters",
    "controller.quorum.election.timeout.ms",
    "controller.quorum.fetch.timeout.ms",
    "controller.quorum.election.backoff.max.ms",
    "controller.quorum.request.timeout.ms",
    "controller.quorum.fetch.max.wait.ms",
    "controller.quorum.high.watermark.linger.ms",
    "broker.heartbeat.interval.ms",
    "broker.session.timeout.ms",
    "unclean.leader.election.enable",
    "min.insync.replicas",
    "auto.leader.rebalance.enable",
    "leader.imbalance.check.interval.seconds",
    "leader.imbalance.max.elections.per.batch",
    "eligible.leader.replicas.version",
    "metadata.max.idle.interval.ms",
    "metadata.log.max.record.bytes.between.snapshots",
    "metadata.log.max.snapshot.interval.ms",
    "metadata.log.segment.bytes",
    "metadata.max.retention.bytes",
    "metadata.max.retention.ms",
    "metadata.log.dir",
    "request.timeout.ms",
    "controller.event.queue.size",
    "max.request.bytes",
    *SECURITY_KEYS,
    "authorizer.enable",
    "super.users",
    "authentication.credentials.file",
    "ssl.client.auth",
    "security.reload.interval.ms",
    "authentication.max.verification.rate",
    "max.connections",
    "max.connections.per.ip",
    "max.connections.per.ip.overrides",
    "max.connection.creation.rate",
    "connections.request.head.timeout.ms",
    "controller.heartbeat.front.enable",
    "connections.max.idle.ms",
    "max.partitions.per.topic",
    "max.topics",
    "replica.fetch.response.max.bytes",
)

BROKER_KEYS = (
    "node.id",
    "controller.quorum.request.timeout.ms",
    "broker.heartbeat.interval.ms",
    "broker.session.timeout.ms",
    "broker.rack",
    "request.timeout.ms",
    "controlled.shutdown.timeout.ms",
    "broker.isr.expansion.enable",
    "broker.simulated.lag.probability",
    "controller.quorum.fetch.max.wait.ms",
    *SECURITY_KEYS,
    "security.reload.interval.ms",
)
