"""Without Java, `make install` stops with one clear line and the Spark tests fail, never skip."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "ensure-java.sh"


@pytest.fixture
def bin_without_java(tmp_path: Path) -> Path:
    """A PATH with the shell tools the script uses and no java (and no apt-get)."""
    d = tmp_path / "bin"
    d.mkdir()
    for tool in ("sh", "sed", "head", "id"):
        found = shutil.which(tool)
        assert found is not None, f"{tool} is not on PATH"
        (d / tool).symlink_to(found)
    return d


def _fake_java(d: Path, version: str) -> None:
    java = d / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2025-04-15' >&2\n")
    java.chmod(0o755)


def _ensure(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(SCRIPT)], env={"PATH": str(path)}, capture_output=True, text=True, timeout=30
    )


def test_install_names_what_to_install_when_java_is_missing(bin_without_java) -> None:
    r = _ensure(bin_without_java)
    assert r.returncode == 2
    assert "openjdk-17-jre-headless" in r.stderr and "Java runtime" in r.stderr


def test_install_refuses_a_java_older_than_17(bin_without_java) -> None:
    _fake_java(bin_without_java, "11.0.2")
    r = _ensure(bin_without_java)
    assert r.returncode == 2
    assert "version '11'" in r.stderr


def test_install_accepts_java_17(bin_without_java) -> None:
    _fake_java(bin_without_java, "17.0.15")
    assert _ensure(bin_without_java).returncode == 0


def test_spark_tests_fail_not_skip_without_java(bin_without_java) -> None:
    env = {**os.environ, "PATH": str(bin_without_java)}
    env.pop("JAVA_HOME", None)
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
         "tests/spark/test_golden.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == pytest.ExitCode.TESTS_FAILED, r.stdout[-2000:]
    assert "Spark needs a Java runtime" in r.stdout
    assert " skipped" not in r.stdout.splitlines()[-1]
