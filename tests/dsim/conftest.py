"""The seed suites' worker pool fixture (shared with tests/sim)."""

from tests.sim.conftest import pool  # noqa: F401 - a fixture, used by name
