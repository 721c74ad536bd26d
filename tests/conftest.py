"""Suite-wide plugins: no test skips silently (tests/skip_guard.py)."""

pytest_plugins = ["tests.skip_guard", "pytester"]
