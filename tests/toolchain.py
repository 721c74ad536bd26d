"""What the Spark tests need from the machine, checked once: pyspark and a Java runtime.

Missing either is a failure, never a skip: a suite that passes with Spark left out
says nothing about Spark. `make install` provides both (scripts/ensure-java.sh).
"""

from __future__ import annotations

import importlib.util
import shutil


def spark_missing() -> str | None:
    """Why Spark cannot run here, or None when it can."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed: run `make install` (it installs the [spark] extra)"
    if shutil.which("java") is None:
        return (
            "Spark needs a Java runtime (17+) on PATH and `java` is not there: "
            "`make install` installs openjdk-17-jre-headless as root, or install a JDK 17+"
        )
    return None
