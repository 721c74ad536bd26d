"""spark-replay on a real Spark standalone cluster: a master and two one-core
workers from pyspark's own distribution on 127.0.0.1 (`spark_replay.cluster`),
the job submitted with ``spark-submit --master spark://...`` as a user would.
Its tables equal, row for row, those of the same job on local[2]; and so do
those of `spark-replay what-if`, submitted the same way to the same cluster
(which once ran in the driver instead: its default --master overrode
spark-submit's). Both are given relative paths, as a user types them (the
executors once looked for them in their own working directories)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import spark_replay.cli
from spark_replay.cli import TABLES, run_job
from spark_replay.cluster import StandaloneCluster, _alive
from spark_replay.generator import GeneratorConfig, generate
from spark_replay.whatif.job import TABLES as WHATIF_TABLES
from spark_replay.whatif.job import run_whatif
from spark_replay.whatif.scenario import build_scenarios

SUBMIT_TIMEOUT_S = 300
UNCLEAN = "unclean.leader.election.enable"


def _rows(spark: Any, path: Path) -> list[tuple[Any, ...]]:
    df = spark.read.parquet(str(path))
    return sorted(map(tuple, df.select(*sorted(df.columns)).collect()), key=repr)


def test_job_on_a_two_worker_cluster_writes_the_tables_of_local_2(
    spark: Any, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    # several segments, metadata transactions (some across segments), fences
    meta = generate(
        data,
        GeneratorConfig(
            records=3_000, seed=12, max_batch_bytes=600, failover_rate=0.01, segment_bytes=16_384
        ),
    )
    assert meta["segments"] >= 3
    local_out = tmp_path / "local"
    run_job(spark, data, local_out, report=False)
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"name": "unclean", "set": {UNCLEAN: True}}]))
    run_whatif(spark, data, local_out, build_scenarios([], grid=grid), report=False)

    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    cluster_out = tmp_path / "cluster"
    cluster = StandaloneCluster(workers=2, cores=1, memory="1g", work_dir=tmp_path / "cluster-work")
    with cluster:
        status = cluster.status()
        assert status is not None and len(status["workers"]) == 2
        pids = cluster.pids
        for job in ([], ["what-if", "--grid", str(grid)]):
            proc = subprocess.run(
                [
                    str(bin_dir / "spark-submit"),
                    "--master",
                    cluster.master_url,
                    "--conf",
                    "spark.executor.memory=768m",
                    spark_replay.cli.__file__,
                    *job,
                    # relative, as a user types them: the executors' working
                    # directories are not the driver's
                    "--log-dir",
                    data.name,
                    "--out",
                    cluster_out.name,
                    "--no-report",
                ],
                capture_output=True,
                text=True,
                timeout=SUBMIT_TIMEOUT_S,
                env=env,
                cwd=tmp_path,
            )
            assert proc.returncode == 0, (job, proc.stderr[-3000:])
        # both jobs ran on the workers' executors, not in their drivers
        status = cluster.status()
        assert status is not None
        apps = status["completedapps"] + status["activeapps"]
        assert len(apps) == 2 and all(app["cores"] >= 1 for app in apps), apps
    assert not any(_alive(p) for p in pids)  # stopped: exactly the processes it started
    for table in ("records", *TABLES, *WHATIF_TABLES):
        assert _rows(spark, cluster_out / table) == _rows(spark, local_out / table), table
    summary = json.loads((cluster_out / "whatif_summary.json").read_text())
    assert summary["identity"]["holds"] and len(summary["scenarios"]) == 2


def test_a_port_taken_between_drawing_and_binding_starts_on_new_ports(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """CI once waited 90 s for a master whose UI port another process took after it
    was drawn free: Spark bound the next port and the status page polled never
    answered. The JVM now fails on a taken port, and the start is tried again."""
    import socket

    import spark_replay.cluster as cluster_mod

    real = cluster_mod.free_ports
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        draws: list[list[int]] = []

        def draw(n: int, *args: Any) -> list[int]:
            ports = real(n, *args)
            if not draws:
                ports[1] = busy  # the master's UI port, taken meanwhile
            draws.append(ports)
            return ports

        monkeypatch.setattr(cluster_mod, "free_ports", draw)
        cluster = StandaloneCluster(workers=1, cores=1, memory="512m", work_dir=tmp_path / "w")
        try:
            cluster.start(timeout_s=60)
            assert len(draws) == 2 and cluster.ui_port == draws[1][1] != busy
            status = cluster.status()
            assert status is not None and cluster._alive_workers(status) == 1
            assert b"java.net.BindException" in (tmp_path / "w" / "master.log").read_bytes()
        finally:
            cluster.stop()
        assert not any(_alive(p) for p in cluster.pids)
