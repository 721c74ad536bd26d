"""The SparkSession for spark-replay: a configuration that works offline and in CI.

The driver binds to 127.0.0.1 (no DNS, no network), the UI is off, shuffles use
few partitions (the tables are keyed by broker and partition, not huge), and the
Python workers run the same interpreter as the driver, so `spark_replay` and
`metadata_log` import in the tasks. Nothing is downloaded: no packages, no jars.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def under_spark_submit() -> bool:
    """spark-submit starts the JVM first and hands the Python driver its gateway."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def cli_master(master: str | None) -> str | None:
    """The master a command-line job asks for: the one given with --master;
    without one, spark-submit's under spark-submit (None: asking for any other
    would override the --master given to spark-submit, and the job would run in
    the driver instead of on the cluster), else local[*]."""
    if master is None and not under_spark_submit():
        return "local[*]"
    return master


def build_session(
    master: str | None = "local[*]",
    app_name: str = "spark-replay",
    shuffle_partitions: int | None = None,
    progress: bool = True,
) -> Any:
    """A SparkSession (reused if one is active). `master=None` leaves it to spark-submit."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    if shuffle_partitions is None:
        shuffle_partitions = max(2, min(8, (os.cpu_count() or 2) * 2))
    conf = {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "true" if progress else "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.adaptive.enabled": "true",
        # build_tables(persist=True) caches the partition states, array columns
        # mostly: compressing them costs more CPU than the memory it saves (measured).
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Our source hands back every filter, so pushdown only prunes files.
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.python.worker.reuse": "true",
        # the records schema is wide; avoids a warning about truncated plan strings
        "spark.sql.debug.maxToStringFields": "200",
        "spark.driver.memory": os.environ.get("SPARK_REPLAY_DRIVER_MEMORY", "2g"),
        # WARN from the context's start (under spark-submit the JVM's default is INFO)
        "spark.log.level": "WARN",
    }
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


# Loggers that repeat a failed task's Python traceback. The CLI reports a log
# error as one line itself and re-raises anything else with its full traceback,
# so in the CLI these only duplicate (or bury) the message.
_TASK_FAILURE_LOGGERS = (
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.sql.execution.datasources.FileFormatWriter",
    "org.apache.spark.sql.execution.datasources.v2.DataSourceV2Strategy",
    "org.apache.spark.util.Utils",  # "Aborting task" with the traceback
    "org.apache.hadoop.mapreduce.lib.output.FileOutputCommitter",  # temp files of the aborted write
)


def quiet_task_failures(spark: Any) -> None:
    """Silence the JVM's and PySpark's per-task failure logs (the CLI prints its own)."""
    import logging

    for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
        logging.getLogger(name).disabled = True
    try:
        jvm = spark.sparkContext._jvm
        level = jvm.org.apache.logging.log4j.Level.OFF
        configurator = jvm.org.apache.logging.log4j.core.config.Configurator
        for name in _TASK_FAILURE_LOGGERS:
            configurator.setLevel(name, level)
    except Exception:  # noqa: BLE001 — a different log4j: keep Spark's default logging
        pass
