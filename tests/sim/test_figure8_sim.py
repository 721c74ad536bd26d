"""The figure-8 fault schedule (tests/sim/figure8.py), many seeds.

make test                          100 seeds (SIM_FIGURE8_SEEDS defaults to 100; ~15 s)
SIM_FIGURE8_SEEDS=5000 make sim    many more
SIM_SEED=N make sim                replay one seed (SIM_TRACE=1: keep an event trace)
"""

from __future__ import annotations

import os

import pytest

from tests.sim.figure8 import run_seed
from tests.sim.seeds import SeedSuite

SUITE = SeedSuite(run_seed, int(os.environ.get("SIM_FIGURE8_SEEDS", "100")))


@pytest.mark.parametrize("seeds", SUITE.chunks(), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_figure8_simulation(seeds: range, pool) -> None:
    SUITE.run(seeds, pool)
