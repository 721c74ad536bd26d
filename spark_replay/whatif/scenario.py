"""What-if scenarios: the policies a replay varies, parsed and validated up front.

A scenario is the configuration in force (`--in-force`, Kafka's defaults for
what the log does not record) with some keys changed (`--set KEY=VALUE`, or one
entry of a `--grid FILE.json`). Every problem (an unknown key, a bad value, a
malformed grid) is a `ScenarioError` whose message names it: the CLI prints it
as one line and exits 2 before Spark starts.

Keys (Kafka's names where Kafka has one; see docs/what-if.md):

- `unclean.leader.election.enable` (bool): the cluster default, and it also
  replaces every topic-level setting of the key found in the log;
- `broker.session.timeout.ms` (int >= 1);
- `controlled.shutdown.enable` (bool): off, a broker asking to shut down just
  stops (its session expires, as Kafka's `controlled.shutdown.enable=false`);
- `replica.placement` (`actual` | `rack-aware` | `rack-unaware`): keep the
  log's replica assignments, or let the controller place every topic again;
- `eligible.leader.replicas.enable` (bool): KIP-966's feature
  (`eligible.leader.replicas.version` 1 or 0) from the log's start, whatever
  level the log had;
- `min.insync.replicas` (int >= 1): the cluster default, and it also replaces
  every topic-level setting of the key found in the log.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kraft.config import KEYS as CONFIG_KEYS

UNCLEAN = "unclean.leader.election.enable"
SESSION = "broker.session.timeout.ms"
CONTROLLED_SHUTDOWN = "controlled.shutdown.enable"
PLACEMENT = "replica.placement"
PLACEMENTS = ("actual", "rack-aware", "rack-unaware")
ELR = "eligible.leader.replicas.enable"
MIN_ISR = "min.insync.replicas"
KNOWN_KEYS = (UNCLEAN, SESSION, CONTROLLED_SHUTDOWN, PLACEMENT, ELR, MIN_ISR)

IN_FORCE = "in-force"  # the identity scenario's name
MAX_SCENARIOS = 64


class ScenarioError(ValueError):
    """A bad --set, --in-force, --racks or grid: the message names the problem."""


@dataclass(frozen=True)
class Scenario:
    """One configuration to replay the facts under."""

    name: str
    unclean: bool = CONFIG_KEYS[UNCLEAN].default
    session_timeout_ms: int = CONFIG_KEYS[SESSION].default
    controlled_shutdown: bool = True
    placement: str = "actual"
    elr: bool | None = None  # None: as the log has it
    min_isr: int = CONFIG_KEYS[MIN_ISR].default
    # Keys this scenario sets (a set unclean value replaces topic-level ones).
    changed: tuple[str, ...] = ()
    racks: Mapping[int, str] = field(default_factory=dict)

    @property
    def overrides_unclean(self) -> bool:
        return UNCLEAN in self.changed

    @property
    def overrides_min_isr(self) -> bool:
        return MIN_ISR in self.changed

    def settings(self) -> dict[str, Any]:
        return {
            UNCLEAN: self.unclean,
            SESSION: self.session_timeout_ms,
            CONTROLLED_SHUTDOWN: self.controlled_shutdown,
            PLACEMENT: self.placement,
            ELR: "as in the log" if self.elr is None else self.elr,
            MIN_ISR: self.min_isr,
        }


def _bool(key: str, raw: Any, where: str) -> bool:
    if isinstance(raw, bool):
        return raw
    low = str(raw).strip().lower()
    if low not in ("true", "false"):
        raise ScenarioError(f"{where}: {key}: {raw!r} is not true or false")
    return low == "true"


def _positive(key: str, raw: Any, where: str) -> int:
    text = str(raw).strip()
    if isinstance(raw, bool) or not text.lstrip("-").isdigit():
        raise ScenarioError(f"{where}: {key}: {raw!r} is not an integer")
    if int(text) < 1:
        raise ScenarioError(f"{where}: {key}: {raw!r} must be >= 1")
    return int(text)


def _apply(s: Scenario, key: str, raw: Any, where: str) -> Scenario:
    """`s` with `key` set to `raw`, validated."""
    if key == UNCLEAN:
        return replace(s, unclean=_bool(key, raw, where))
    if key == ELR:
        return replace(s, elr=_bool(key, raw, where))
    if key == MIN_ISR:
        return replace(s, min_isr=_positive(key, raw, where))
    if key == CONTROLLED_SHUTDOWN:
        return replace(s, controlled_shutdown=_bool(key, raw, where))
    if key == SESSION:
        return replace(s, session_timeout_ms=_positive(key, raw, where))
    if key == PLACEMENT:
        if raw not in PLACEMENTS:
            raise ScenarioError(f"{where}: {key}: {raw!r} is not one of {', '.join(PLACEMENTS)}")
        return replace(s, placement=str(raw))
    raise ScenarioError(f"{where}: unknown key {key!r} (known: {', '.join(KNOWN_KEYS)})")


def parse_assignments(items: Sequence[str], flag: str) -> list[tuple[str, str]]:
    """`KEY=VALUE` strings as pairs; a missing '=' or key is an error naming the item."""
    out = []
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ScenarioError(f"{flag} {item!r} is not KEY=VALUE")
        out.append((key.strip(), value.strip()))
    return out


def with_settings(
    base: Scenario, pairs: Sequence[tuple[str, Any]], where: str, name: str | None = None
) -> Scenario:
    s = base
    changed = list(base.changed)
    for key, value in pairs:
        s = _apply(s, key, value, where)
        if key not in changed:
            changed.append(key)
    return replace(s, name=name or s.name, changed=tuple(changed))


def parse_racks(text: str | None) -> dict[int, str]:
    """`1=a,2=b,...` -> {1: "a", 2: "b"}."""
    if not text:
        return {}
    racks: dict[int, str] = {}
    for item in text.split(","):
        b, eq, rack = item.partition("=")
        if not eq or not b.strip().isdigit() or not rack.strip():
            raise ScenarioError(f"--racks: {item!r} is not BROKER_ID=RACK")
        if int(b) in racks:
            raise ScenarioError(f"--racks: broker {int(b)} is given twice")
        racks[int(b)] = rack.strip()
    return racks


def _text(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def scenario_name(pairs: Sequence[tuple[str, Any]]) -> str:
    return ",".join(f"{k}={_text(v)}" for k, v in pairs) or IN_FORCE


def load_grid(path: str | Path) -> list[dict[str, Any]]:
    """A grid file: a JSON list of scenarios (or {"scenarios": [...]}), each
    {"name": optional text, "set": {KEY: VALUE, ...}}."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        raise ScenarioError(f"--grid {p}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(f"--grid {p}: cannot read it ({e})") from None
    except json.JSONDecodeError as e:
        raise ScenarioError(f"--grid {p}: not JSON ({e.msg} at line {e.lineno})") from None
    if isinstance(doc, dict) and "scenarios" in doc:
        doc = doc["scenarios"]
    if not isinstance(doc, list) or not doc:
        raise ScenarioError(f"--grid {p}: expected a non-empty list of scenarios")
    if len(doc) > MAX_SCENARIOS:
        raise ScenarioError(f"--grid {p}: {len(doc)} scenarios, at most {MAX_SCENARIOS}")
    for i, entry in enumerate(doc):
        if not isinstance(entry, dict) or not isinstance(entry.get("set", {}), dict):
            raise ScenarioError(
                f'--grid {p}: scenario {i} is not {{"name": ..., "set": {{KEY: VALUE}}}}'
            )
        extra = set(entry) - {"name", "set"}
        if extra:
            raise ScenarioError(f"--grid {p}: scenario {i} has unknown fields {sorted(extra)}")
        if "name" in entry and (not isinstance(entry["name"], str) or not entry["name"]):
            raise ScenarioError(f"--grid {p}: scenario {i}'s name is not a non-empty string")
    return doc


def build_scenarios(
    sets: Sequence[str],
    grid: str | Path | None = None,
    in_force: Sequence[str] = (),
    racks: str | None = None,
) -> list[Scenario]:
    """The in-force scenario first (the identity check), then the asked ones."""
    base = with_settings(
        Scenario(IN_FORCE, racks=parse_racks(racks)),
        parse_assignments(in_force, "--in-force"),
        "--in-force",
    )
    base = replace(base, changed=())
    set_pairs = parse_assignments(sets, "--set")
    asked = with_settings(base, set_pairs, "--set", scenario_name(set_pairs))
    out = [base]
    if grid is None:
        if set_pairs:
            out.append(asked)
    else:
        for i, entry in enumerate(load_grid(grid)):
            pairs = [(str(k), v) for k, v in entry.get("set", {}).items()]
            where = f"--grid scenario {i}"
            name = entry.get("name") or scenario_name([*set_pairs, *pairs])
            if name == IN_FORCE:
                name = f"scenario-{i}"
            out.append(with_settings(asked, pairs, where, name))
    names = [s.name for s in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ScenarioError(f"scenario names must differ: {', '.join(dup)} repeats")
    return out
