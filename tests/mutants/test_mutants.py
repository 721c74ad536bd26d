"""Every mutant of tests/mutants/catalog.py is caught by a simulator within make
test's seed budget (`make mutants` measures the share of seeds; this finds the
first catching seed, which keeps it cheap), and applying a mutant changes
nothing once it is undone."""

from __future__ import annotations

import pytest

from kraft.raft.core import RaftCore
from tests.mutants.catalog import MUTANTS, Mutant, applied, check_all
from tests.mutants.run import BUDGET, caught, first_catch


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutant_is_caught(mutant: Mutant) -> None:
    tried = []
    for suite in mutant.suites:
        seed = first_catch(mutant.name, suite, range(BUDGET[suite]))
        if seed is not None:
            # the same seed passes without the mutant: the catch is the mutant's doing
            assert not caught(None, suite, seed), f"{suite} seed {seed} fails unmutated"
            return
        tried.append(f"{suite}: {BUDGET[suite]} seeds")
    pytest.fail(f"mutant {mutant.name} ({mutant.bug}) not caught: {', '.join(tried)}")


def test_applied_is_undone() -> None:
    before = RaftCore.__dict__["_maybe_advance_hw"]
    with applied(MUTANTS[0]):
        assert RaftCore.__dict__["_maybe_advance_hw"] is not before
    assert RaftCore.__dict__["_maybe_advance_hw"] is before


def test_every_mutant_applies() -> None:
    check_all()
