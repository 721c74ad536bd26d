"""`broker-agent`: one broker agent, or a fleet of them in one process (DESIGN 1.1, 1.3).

    broker-agent --broker-id N --controllers URL[,URL...] [--rack R]
                 [--config FILE] [--override key=value ...] [--log-format json]
    broker-agent fleet --count K --first-id N --controllers URL[,URL...] [...]

Configuration uses Kafka's names (kraft.config.BROKER_KEYS): a properties file,
then `--override`, then explicit flags. SIGTERM/SIGINT start a controlled
shutdown (exit 0 once the controller lets the broker go or the timeout passes);
a second signal stops waiting. A user error is one line on stderr and exit 2,
never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from broker_agent.agent import AgentSettings
from broker_agent.fleet import RAMP_MS_PER_AGENT, Fleet, FleetSpec
from broker_agent.isr import IsrConfig
from kraft.arg_types import port_number, whole_number
from kraft.config import BROKER_KEYS, SECURITY_KEYS, ConfigError, load_config
from kraft.logs import setup_logging
from kraft.raft.config import RaftConfig
from kraft.raft_shell.dir_lock import DataDirInUse, hold_dir_lock
from kraft.security.client_security import ClientSecurity, client_security, from_config
from kraft.security.reload import Reloader

log = logging.getLogger("broker_agent")

DEFAULT_LAG_PROBABILITY = 0.05  # --simulate-lag without an explicit probability


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--controllers",
        required=True,
        metavar="URL[,URL...]",
        help="controller URLs (any of them; the agent finds the active one)",
    )
    p.add_argument("--rack", default=None, help="the broker's rack (broker.rack)")
    p.add_argument("--config", default=None, metavar="FILE", help="Kafka-style properties file")
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config value that wins over --config (repeatable)",
    )
    p.add_argument("--cluster-id", default=None, help="expected cluster id (default: learned)")
    p.add_argument(
        "--simulate-lag",
        action="store_true",
        help=f"turn the seeded simulated-lag ISR model on (probability "
        f"{DEFAULT_LAG_PROBABILITY} per check unless broker.simulated.lag.probability is set)",
    )
    p.add_argument("--seed", type=whole_number(), default=0, help="seed of the simulated-lag model")
    p.add_argument(
        "--status-interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="print a status line this often (0: only at exit)",
    )
    p.add_argument(
        "--status-port",
        type=port_number,
        default=None,
        metavar="PORT",
        help="serve GET /status, GET /heartbeats?since=N and GET /v1/metadata on "
        "127.0.0.1:PORT (off by default)",
    )
    p.add_argument(
        "--listener-port", type=port_number, default=9092, help="advertised PLAINTEXT port"
    )
    p.add_argument(
        "--data-dir",
        default=None,
        metavar="DIR",
        help="keeps the KIP-966 clean shutdown file (the broker epoch of a clean "
        "shutdown, sent as previous_broker_epoch at the next registration); `{id}` "
        "is the broker id (a fleet needs it). Without it every restart counts as unclean",
    )
    p.add_argument("--log-format", choices=("text", "json"), default="text")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="broker-agent",
        description="A KRaft broker lifecycle agent (registration, heartbeats, metadata "
        "observer, ISR changes, controlled shutdown). `broker-agent fleet --help` for fleets.",
    )
    parser.add_argument(
        "--broker-id", type=whole_number(), required=True, help="this broker's node.id"
    )
    _common(parser)
    return parser


def build_fleet_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="broker-agent fleet",
        description="K simulated brokers in one process: one shared connection pool, one "
        "shared metadata observer (node id = --first-id).",
    )
    parser.add_argument("--count", type=whole_number(), required=True, help="how many agents (K)")
    parser.add_argument(
        "--first-id", type=whole_number(), required=True, help="broker ids N .. N+K-1"
    )
    parser.add_argument(
        "--ramp-ms",
        type=whole_number(),
        default=None,
        help=f"spread the agents' starts over this long (default: {RAMP_MS_PER_AGENT} ms per agent)",
    )
    parser.add_argument(
        "--max-connections",
        type=whole_number(),
        default=100,
        help="connections to the controllers, all agents together (half of them carry only heartbeats)",
    )
    parser.add_argument(
        "--no-simulate-lag",
        action="store_true",
        help="fleets simulate lag by default (issue 5); turn it off",
    )
    _common(parser)
    return parser


def spec_from_args(args: argparse.Namespace, fleet: bool) -> FleetSpec:
    first_id = args.first_id if fleet else args.broker_id
    count = args.count if fleet else 1
    config = load_config(
        BROKER_KEYS,
        args.config,
        args.override,
        explicit={"node.id": None if fleet else args.broker_id, "broker.rack": args.rack},
    )
    config.log_unused(log)
    raw_lag = str(config["broker.simulated.lag.probability"])
    try:
        lag = float(raw_lag)
    except ValueError:
        raise ConfigError(
            f"broker.simulated.lag.probability: {raw_lag!r} is not a number"
        ) from None
    if not 0.0 <= lag <= 1.0:
        raise ConfigError(f"broker.simulated.lag.probability: {raw_lag!r} must be in [0, 1]")
    simulate = args.simulate_lag or (fleet and not args.no_simulate_lag)
    if simulate and lag == 0.0:
        lag = DEFAULT_LAG_PROBABILITY
    elif fleet and args.no_simulate_lag:
        lag = 0.0
    interval = config["broker.heartbeat.interval.ms"]
    session = config["broker.session.timeout.ms"]
    if interval >= session:
        raise ConfigError(
            f"broker.heartbeat.interval.ms ({interval}) must be below "
            f"broker.session.timeout.ms ({session})"
        )
    settings = AgentSettings(
        heartbeat_interval_ms=interval,
        # Kafka's broker-to-controller heartbeat channel times a request out after
        # half the session (KAFKA-14392): long enough that a busy controller (or a
        # busy fleet process) is not abandoned, and reconnected to, mid-answer; short
        # enough to try another controller before the session ends.
        request_timeout_ms=session // 2,
        controlled_shutdown_timeout_ms=config["controlled.shutdown.timeout.ms"],
        rack=config.get("broker.rack"),
        listener_port=args.listener_port,
        data_dir=_data_dir(args.data_dir, fleet),
        isr=IsrConfig(
            expansion_enabled=config["broker.isr.expansion.enable"],
            lag_probability=lag,
            request_timeout_ms=config["request.timeout.ms"],
        ),
    )
    controllers = tuple(u.strip().rstrip("/") for u in args.controllers.split(",") if u.strip())
    security = _security(config, first_id, count)
    return FleetSpec(
        first_id=first_id,
        count=count,
        controllers=controllers,
        settings=settings,
        raft=RaftConfig.from_config(config),
        cluster_id=args.cluster_id,
        seed=args.seed,
        status_interval_s=args.status_interval,
        ramp_ms=getattr(args, "ramp_ms", None),
        max_connections=getattr(args, "max_connections", 100),
        status_port=args.status_port,
        security=security,
    )


def _data_dir(value: str | None, fleet: bool) -> str | None:
    if value is not None and fleet and "{id}" not in value:
        raise ConfigError("--data-dir of a fleet must contain {id} (one directory per broker)")
    return value


def _security(config: Any, first_id: int, count: int) -> dict[int, ClientSecurity]:
    """Each broker's TLS context and credential. `{id}` in ssl.keystore.location or
    authentication.token.file is replaced by the broker id, so a fleet's agents each
    use their own (broker 4 cannot act as broker 5)."""
    paths = {k: config.get(k) for k in SECURITY_KEYS}
    if not any(paths.values()):
        return {}
    per_id = any(v and "{id}" in v for v in paths.values())
    if count > 1 and paths["authentication.token.file"] and not per_id:
        raise ConfigError(
            "a fleet's agents each need their own credential: put {id} in "
            "authentication.token.file (e.g. certs/broker-{id}.token)"
        )
    out: dict[int, ClientSecurity] = {}
    shared: ClientSecurity | None = None
    for bid in range(first_id, first_id + count):
        if per_id:
            p = {k: v.replace("{id}", str(bid)) if v else v for k, v in paths.items()}
            out[bid] = client_security(
                p["ssl.truststore.location"],
                p["ssl.keystore.location"],
                p["authentication.token.file"],
                config.get("security.reload.interval.ms"),
            )
        else:
            shared = shared or from_config(config)
            out[bid] = shared
    return out


async def _serve(fleet: Fleet) -> int:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, fleet.shutdown)
    # Certificates and tokens rotate without a restart (issue 25): SIGHUP, or a change
    # of the files seen by the poll.
    secs = list(fleet.spec.security.values())
    reloader = Reloader(
        secs, min((s.reload_interval_ms for s in secs), default=0), who="broker-agent"
    )
    loop.add_signal_handler(signal.SIGHUP, reloader.reload)
    reloader.start()
    try:
        return await fleet.run()
    finally:
        await reloader.stop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    fleet_mode = bool(argv) and argv[0] == "fleet"
    parser = build_fleet_parser() if fleet_mode else build_parser()
    args = parser.parse_args(argv[1:] if fleet_mode else argv)
    setup_logging(args.log_format, args.log_level)
    try:
        spec = spec_from_args(args, fleet_mode)
    except (ConfigError, ValueError) as e:
        print(f"broker-agent: {e}", file=sys.stderr)
        return 2
    with contextlib.ExitStack() as held:
        try:
            for d in _agent_data_dirs(spec):
                held.enter_context(hold_dir_lock(d, "broker"))
        except (DataDirInUse, OSError) as e:
            print(f"broker-agent: {e}", file=sys.stderr)
            return 1
        fleet = Fleet(spec)
        try:
            return asyncio.run(_serve(fleet))
        except KeyboardInterrupt:  # pragma: no cover - the handler normally catches SIGINT
            return 0
        except OSError as e:  # e.g. the status port is taken
            print(f"broker-agent: {e}", file=sys.stderr)
            return 1


def _agent_data_dirs(spec: FleetSpec) -> list[Path]:
    """Each agent's --data-dir ({id} replaced), held locked while the agents run."""
    d = spec.settings.data_dir
    if d is None:
        return []
    ids = range(spec.first_id, spec.first_id + spec.count)
    return sorted({Path(d.replace("{id}", str(bid))) for bid in ids})


if __name__ == "__main__":
    sys.exit(main())
