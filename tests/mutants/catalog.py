"""Classic consensus and controller bugs, planted one at a time at run time.

A mutant is a list of source patches: the product function's own source
(`inspect.getsource`) with one exact fragment replaced, compiled in the
function's module namespace and bound in its place (on its class, or in every
module that imported it by name) for the duration of `applied(mutant)`. A
fragment that is not found exactly once is an error, so a mutant never silently
stops applying when the product code changes. Nothing here touches a file of the
product; the mutants exist only in the test process.

Each mutant names the simulators expected to catch it (tests/mutants/run.py
runs those; `make mutants` prints the table).
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kraft.controller import heartbeat, partition_change, quorum_controller
from kraft.raft import core
from kraft.server import controller_service
from metadata_log import epoch_cache


@dataclass(frozen=True)
class Patch:
    owner: Any  # a class or a module
    name: str
    old: str
    new: str


@dataclass(frozen=True)
class Mutant:
    name: str
    bug: str
    patches: tuple[Patch, ...]
    suites: tuple[str, ...]  # "raft", "figure8", "deployed"


RAFT = ("raft", "figure8", "deployed")
# The controller's bugs: only the deployed simulation runs the controller (the
# real node, service and controller; tests/dsim).
CONTROLLER = ("deployed",)
Core = core.RaftCore

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "figure8",
        "a new leader commits an older epoch's entries by counting replicas "
        "(no 'commit only from its own epoch' rule in _maybe_advance_hw)",
        (
            Patch(
                Core,
                "_maybe_advance_hw",
                "if candidate > s.epoch_start_offset and candidate > self.high_watermark:",
                "if candidate > self.high_watermark:",
            ),
        ),
        ("figure8", "raft", "deployed"),  # its own schedule first (tests/sim/figure8.py)
    ),
    Mutant(
        "vote_log_check",
        "a vote is granted without the log up-to-date check",
        (
            Patch(
                Core,
                "_vote",
                "            if not self._log_up_to_date(req.last_offset_epoch, req.last_offset):\n"
                "                return False\n",
                "",
            ),
        ),
        RAFT,
    ),
    Mutant(
        "unflushed_commit",
        "the leader counts its unflushed log toward the commit",
        (
            Patch(
                Core,
                "_maybe_advance_hw",
                "self.log.flushed_offset\n                if v == self.node_id",
                "self.log.end_offset\n                if v == self.node_id",
            ),
        ),
        RAFT,
    ),
    Mutant(
        "double_vote",
        "a voter that voted in an epoch votes again for another candidate",
        (
            Patch(
                Core,
                "_vote",
                "            if voted is not None:\n"
                "                return voted == req.candidate_id  # one vote per epoch (idempotent)\n",
                "",
            ),
        ),
        RAFT,
    ),
    Mutant(
        "no_majority",
        "the leader commits what fewer than a majority of voters hold",
        (
            Patch(
                Core,
                "_maybe_advance_hw",
                "candidate = ends[self._majority() - 1]",
                "candidate = ends[max(0, self._majority() - 2)]",
            ),
        ),
        RAFT,
    ),
    Mutant(
        "binding_prevote",
        "a granted pre-vote binds: the voter moves to the prospective's epoch and "
        "records the vote in memory, unpersisted",
        (
            Patch(
                Core,
                "_pre_vote",
                "        return self._log_up_to_date(req.last_offset_epoch, req.last_offset)\n",
                "        granted = self._log_up_to_date(req.last_offset_epoch, req.last_offset)\n"
                "        if granted:\n"
                "            self._set_state(\n"
                "                Unattached(req.candidate_epoch, req.candidate_id, self._election_timeout())\n"
                "            )\n"
                "        return granted\n",
            ),
        ),
        RAFT,
    ),
    Mutant(
        "truncation_epoch",
        "a truncated log forgets to drop the leader epochs it no longer holds",
        (
            Patch(
                epoch_cache.LeaderEpochCache,
                "truncate_from_end",
                "        del self._epochs[i:]\n        del self._starts[i:]\n",
                "",
            ),
        ),
        RAFT,
    ),
    Mutant(
        "fence_heartbeating",
        "a broker's heartbeats do not renew its session (it is fenced while heartbeating)",
        (
            Patch(
                heartbeat.BrokerHeartbeatManager,
                "touch",
                "        self._set_contact(s, max(now_ms, s.last_contact_ms))\n",
                "",
            ),
            Patch(
                heartbeat.BrokerHeartbeatManager,
                "note_contact",
                "if s is not None and now_ms > s.last_contact_ms:",
                "if False:",
            ),
        ),
        CONTROLLER,
    ),
    Mutant(
        "elect_fenced",
        "BestLeader elects a fenced broker (the acceptability check dropped)",
        (
            Patch(
                partition_change.PartitionChangeBuilder,
                "_elect",
                "ok = self._acceptable\n",
                "ok = lambda _b: True  # noqa: E731\n",
            ),
            Patch(
                partition_change,
                "removal_change",
                "    isr = p.isr\n    if broker_id in isr",
                "    acceptable = lambda _b: True  # noqa: E731\n"
                "    isr = p.isr\n    if broker_id in isr",
            ),
        ),
        CONTROLLER,
    ),
    Mutant(
        "isr_check",
        "BestLeader elects a replica outside the ISR (the ISR check dropped)",
        (
            Patch(
                partition_change.PartitionChangeBuilder,
                "_valid",
                "if replica in isr:",
                "if True:",
            ),
            Patch(
                partition_change,
                "removal_change",
                "if replica in isr and acceptable(replica):",
                "if acceptable(replica):",
            ),
        ),
        CONTROLLER,
    ),
    Mutant(
        "replay_twice",
        "a record is replayed twice into the image",
        (
            Patch(
                quorum_controller.QuorumController,
                "replay",
                "        self.image.replay(record, offset)\n",
                "        self.image.replay(record, offset)\n        self.image.replay(record, offset)\n",
            ),
        ),
        CONTROLLER,
    ),
    Mutant(
        "service_early_reply",
        "ControllerService answers a command before its records are committed "
        "(commit handling in controller_service.py)",
        (
            Patch(
                controller_service.ControllerService,
                "_wait_for",
                "if offset <= self.writer.committed_offset():",
                "if True:",
            ),
        ),
        ("deployed",),
    ),
)

BY_NAME = {m.name: m for m in MUTANTS}


def _source(owner: Any, name: str, original: Any) -> str:
    """The function's source as indented in its file, found by name (not by the
    loaded code's line numbers, which a file edited since the import would shift)."""
    path = inspect.getsourcefile(original)
    assert path is not None
    with open(path, encoding="utf-8") as f:
        text = f.read()
    body: list[ast.stmt] = ast.parse(text).body
    if inspect.isclass(owner):
        cls = [n for n in body if isinstance(n, ast.ClassDef) and n.name == owner.__name__]
        if not cls:
            raise LookupError(f"class {owner.__name__} not found in {path}")
        body = cls[0].body
    defs = [n for n in body if isinstance(n, ast.FunctionDef) and n.name == name]
    if not defs:
        raise LookupError(f"function {name} not found in {path}")
    lines = text.splitlines(keepends=True)
    return "".join(lines[defs[0].lineno - 1 : defs[0].end_lineno])


def _compile(p: Patch) -> tuple[Any, Any]:
    """(original, mutated) function of one patch."""
    original = inspect.getattr_static(p.owner, p.name)
    src = _source(p.owner, p.name, original)
    n = src.count(p.old)
    if n != 1:
        raise LookupError(f"mutant fragment found {n} times in {p.name}: {p.old!r}")
    mutated = textwrap.dedent(src.replace(p.old, p.new))
    ns: dict[str, Any] = {}
    exec(compile(mutated, f"<mutant of {p.name}>", "exec"), original.__globals__, ns)
    return original, ns[p.name]


@contextmanager
def applied(mutant: Mutant) -> Iterator[None]:
    """The product with `mutant` planted, until the block ends."""
    undo: list[tuple[Any, str, Any]] = []
    try:
        for p in mutant.patches:
            original, mutated = _compile(p)
            if inspect.isclass(p.owner):
                undo.append((p.owner, p.name, original))
                setattr(p.owner, p.name, mutated)
                continue
            # a module function: rebind it wherever it was imported by name
            for mod in list(sys.modules.values()):
                d = getattr(mod, "__dict__", None)
                if d is None:
                    continue
                for k, v in list(d.items()):
                    if v is original:
                        undo.append((mod, k, original))
                        setattr(mod, k, mutated)
        yield
    finally:
        for owner, name, original in reversed(undo):
            setattr(owner, name, original)


def check_all() -> None:
    """Every mutant applies (each fragment found once); LookupError otherwise."""
    for m in MUTANTS:
        for p in m.patches:
            _compile(p)
