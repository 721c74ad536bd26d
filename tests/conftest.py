"""Suite-wide plugins: no test skips silently (tests/skip_guard.py); story modules keep
their step order under `make test-random` (tests/story_order.py)."""

pytest_plugins = ["tests.skip_guard", "tests.story_order", "pytester"]
