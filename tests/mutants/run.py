"""`make mutants`: every mutant of tests/mutants/catalog.py against the simulators
that should catch it, over a seed budget each; prints a table of the share of
seeds that catch each one (and JSON with --json).

    .venv/bin/python -m tests.mutants.run [--seeds raft=500,figure8=100,deployed=100]
                                          [--only figure8,double_vote] [--workers 2]

A seed catches a mutant when its run fails (an invariant breaks, or the code
raises). Before the mutants, the same seeds must pass unmutated (the baseline),
so a failure is the mutant's doing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from tests.mutants.catalog import BY_NAME, MUTANTS, applied, check_all

# make test's seed budgets (tests/sim/test_sim.py, test_figure8_sim.py,
# tests/dsim/test_dsim.py)
BUDGET = {"raft": 500, "figure8": 100, "deployed": 100}


def suite_runner(suite: str) -> Callable[[int], Any]:
    if suite == "raft":
        from tests.sim.simulator import run_seed
    elif suite == "figure8":
        from tests.sim.figure8 import run_seed
    elif suite == "deployed":
        from tests.dsim.cluster import run_seed
    else:
        raise ValueError(f"unknown suite {suite}")
    return run_seed


def caught(mutant: str | None, suite: str, seed: int) -> bool:
    """Whether `seed` of `suite` fails with `mutant` planted (None: unmutated)."""
    run = suite_runner(suite)
    with applied(BY_NAME[mutant]) if mutant is not None else contextlib.nullcontext():
        try:
            run(seed)
        except Exception:  # noqa: BLE001 - any failure of the run is a catch
            return True
    return False


def _job(args: tuple[str | None, str, int]) -> tuple[str | None, str, int, bool]:
    mutant, suite, seed = args
    return mutant, suite, seed, caught(mutant, suite, seed)


def first_catch(mutant: str, suite: str, seeds: range) -> int | None:
    """The first seed in `seeds` that catches `mutant` (in this process)."""
    for seed in seeds:
        if caught(mutant, suite, seed):
            return seed
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seeds", default="", help="suite=N,... (default: make test's budgets)")
    ap.add_argument("--only", default="", help="comma-separated mutant names")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    budget = dict(BUDGET)
    for part in filter(None, a.seeds.split(",")):
        k, v = part.split("=")
        budget[k] = int(v)
    check_all()  # every fragment still in the product: fail now, not after the runs
    mutants = [BY_NAME[n] for n in a.only.split(",")] if a.only else list(MUTANTS)
    suites = sorted({s for m in mutants for s in m.suites})
    jobs: list[tuple[str | None, str, int]] = [
        (None, s, i) for s in suites for i in range(budget[s])
    ]
    jobs += [(m.name, s, i) for m in mutants for s in m.suites for i in range(budget[s])]
    t0 = time.time()
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(a.workers) as pool:
        results = pool.map(_job, jobs, chunksize=4)
    hits: dict[tuple[str | None, str], list[int]] = {}
    for mutant, suite, seed, hit in results:
        if hit:
            hits.setdefault((mutant, suite), []).append(seed)
    rows = []
    ok = True
    for s in suites:
        bad = hits.get((None, s), [])
        if bad:
            ok = False
            print(f"baseline: {s} fails unmutated on seeds {bad[:10]}", file=sys.stderr)
    for m in mutants:
        row: dict[str, Any] = {"mutant": m.name, "bug": m.bug}
        any_hit = False
        for s in m.suites:
            n = len(hits.get((m.name, s), []))
            row[s] = {"caught": n, "seeds": budget[s], "share": round(n / budget[s], 3)}
            any_hit |= n > 0
        row["caught"] = any_hit
        ok &= any_hit
        rows.append(row)
    if a.json:
        print(json.dumps({"mutants": rows, "budget": budget, "seconds": round(time.time() - t0)}))
    else:
        cols = ["raft", "figure8", "deployed"]
        print(f"{'mutant':<22}" + "".join(f"{c + ' sim':>20}" for c in cols) + "  caught")
        for r in rows:
            cells = []
            for c in cols:
                v = r.get(c)
                cells.append(
                    f"{v['caught']:>5}/{v['seeds']:<4} {100 * v['share']:5.1f}%" if v else "-"
                )
            print(
                f"{r['mutant']:<22}"
                + "".join(f"{x:>20}" for x in cells)
                + ("  yes" if r["caught"] else "  NO")
            )
        print(
            f"({round(time.time() - t0)} s; seeds per suite {budget}; share = seeds that catch it)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
