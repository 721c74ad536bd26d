"""Spark test fixtures: one local[2] SparkSession for the whole run, offline.

The session binds to 127.0.0.1 with the UI off and few shuffle partitions, as
the CLI does. Every test here is marked `spark`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.toolchain import spark_missing


@pytest.fixture(autouse=True, scope="session")
def _spark_runtime() -> None:
    """Every Spark test fails, never skips, when pyspark or Java is missing."""
    missing = spark_missing()
    if missing is not None:
        pytest.fail(missing, pytrace=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from spark_replay.session import build_session

    session = build_session(
        "local[2]", app_name="spark-replay-tests", shuffle_partitions=2, progress=False
    )
    yield session
    session.stop()
    # Close py4j's connection to the JVM now, while logging still has its streams:
    # left to the garbage collector at interpreter exit, its close() logs to
    # pytest's already closed capture stream ("--- Logging error ---" after the run).
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is not None:
        gateway.shutdown()
        SparkContext._gateway = None
        SparkContext._jvm = None
