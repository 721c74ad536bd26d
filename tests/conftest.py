"""Suite-wide plugins: no test skips silently (tests/skip_guard.py); story modules keep
their step order under `make test-random` (tests/story_order.py). And no test leaves
a logging handler behind on a stream pytest has closed."""

import logging
from collections.abc import Iterator

import pytest

pytest_plugins = ["tests.skip_guard", "tests.story_order", "pytester"]


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """A CLI's main() run in-process (kraft.logs.setup_logging) sets the root logger
    to INFO with a handler on the sys.stderr of that moment: pytest's capture of the
    test, closed after it. A later message from any library, such as py4j's
    "Closing down clientserver connection" when a Spark gateway is collected, then
    printed "--- Logging error ---" in the middle of the run (it showed once tests
    ran on several workers, in another order)."""
    root = logging.getLogger()
    before, level = set(root.handlers), root.level
    yield
    for h in root.handlers[:]:
        if h not in before and type(h) is logging.StreamHandler:
            root.removeHandler(h)
    root.setLevel(level)
