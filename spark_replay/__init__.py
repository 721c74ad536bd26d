"""Spark replay of the `__cluster_metadata` log into cluster-history tables (DESIGN 1.6).

Modules:

- `decode`: one segment or snapshot file -> Arrow record batches (pure, no Spark);
- `datasource`: the ``kraft_metadata_log`` Spark 4 Python Data Source, one input
  partition per file, pruning by offset;
- `tables`: each output table's columns and the record-type groups (no Spark:
  `one_process` uses them too);
- `segment_replay`: the replay rules, vectorised over one file (summaries that
  fold into starting states, the replay of a file from them): one place for the
  Spark tasks and the one-process replay;
- `replay_job`: the tables job over files, as Spark tasks or a plain loop;
- `history`: the tables as DataFrame transforms (windows per broker / partition):
  the reference the replay is tested against, the as-of queries, the LogInfo;
- `report`: summary.json and report.html with matplotlib plots;
- `session`: an offline SparkSession configuration;
- `cluster`: a Spark standalone master and workers on 127.0.0.1 from pyspark's
  distribution (``python -m spark_replay.cluster start|stop|run``);
- `cli`: ``spark-replay --log-dir DIR --out OUT [--master M] [--as-of-offset N | --as-of-time T]``;
- `one_process`: the same tables in one Python process, the same functions, without Spark
  (``python -m spark_replay.one_process --log-dir DIR --out OUT``, complete logs
  only): the baseline of benchmarks/replay_bench.py and a cross-check;
- `generator`: seeded realistic logs through the real controller
  (``python -m spark_replay.generator --out DIR --records N --seed S``).

Output under OUT: ``records/``, ``broker_history/``, ``partition_history/``,
``leader_elections/``, ``offline_partitions/`` (Parquet), ``state_as_of/`` (with
--as-of-*: ``brokers/``, ``partitions/`` and ``state.json``), ``summary.json``,
``report.html``.
"""
