"""The simulator suites' shared fixture: one worker pool per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.sim.seeds import worker_pool


@pytest.fixture(scope="module")
def pool() -> Iterator[object]:
    with worker_pool() as p:
        yield p
