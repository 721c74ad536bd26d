"""The cluster-history tables' schema: the record types they are built from, and
their columns (and the as-of state's) in order.

One definition for `spark_replay.history` (the Spark transforms that write the
tables and select the as-of state) and for `spark_replay.one_process`, which
writes the same tables without Spark (benchmarks/replay_bench.py compares them
with Spark's column for column). Pure: no Spark, no pyarrow.
"""

from __future__ import annotations

BROKER_TYPES = (
    "RegisterBrokerRecord",
    "UnregisterBrokerRecord",
    "FenceBrokerRecord",
    "UnfenceBrokerRecord",
    "BrokerRegistrationChangeRecord",
)
PARTITION_TYPES = ("PartitionRecord", "PartitionChangeRecord")
TOPIC_TYPES = ("TopicRecord", "RemoveTopicRecord")
TXN_TYPES = ("BeginTransactionRecord", "EndTransactionRecord", "AbortTransactionRecord")
# The record types that change the state the tables follow (besides transactions).
STATE_TYPES = (*BROKER_TYPES, *PARTITION_TYPES, *TOPIC_TYPES, "ConfigRecord")

# An interval is [start_offset, end_offset), end_offset null while it is open.
INTERVAL_COLUMNS = ("start_offset", "end_offset", "start_time_ms", "end_time_ms")

# A broker's state as the image holds it (MetadataImage's BrokerRegistration).
BROKER_STATE_KEYS = (
    "broker_id",
    "broker_epoch",
    "incarnation_id",
    "rack",
    "fenced",
    "in_controlled_shutdown",
)
# A partition's state besides its key: the records' typed columns of the same names.
PARTITION_STATE_VALUES = (
    "leader",
    "isr",
    "replicas",
    "removing_replicas",
    "adding_replicas",
    # KIP-966: eligible leader replicas (the records' eligible_leader_replicas) and
    # the last known ELR; MetadataImage's PartitionRegistration.elr/.last_known_elr
    "elr",
    "last_known_elr",
    "leader_recovery_state",
    "leader_epoch",
    "partition_epoch",
)
# A partition's state as the image holds it, with its topic's name and id.
PARTITION_STATE_KEYS = ("topic", "topic_id", "partition_id", *PARTITION_STATE_VALUES)
# What starts a new broker_history interval when it changes (besides the broker).
BROKER_INTERVAL_KEY = (
    "broker_epoch",
    "state",
    "fenced",
    "in_controlled_shutdown",
    "incarnation_id",
    "rack",
)

BROKER_HISTORY_COLUMNS = ("broker_id", *BROKER_INTERVAL_KEY, *INTERVAL_COLUMNS)
PARTITION_HISTORY_COLUMNS = (*PARTITION_STATE_KEYS, *INTERVAL_COLUMNS)
LEADER_ELECTIONS_COLUMNS = (
    "offset",
    "applied_offset",
    "append_time_ms",
    "topic",
    "topic_id",
    "partition_id",
    "old_leader",
    "new_leader",
    "unclean",
    "election_type",
    "cause",
    "cause_broker_id",
    "leader_epoch",
)
OFFLINE_PARTITIONS_COLUMNS = ("topic", "topic_id", "partition_id", *INTERVAL_COLUMNS)

# The four history tables by their directory name under the job's output.
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "broker_history": BROKER_HISTORY_COLUMNS,
    "partition_history": PARTITION_HISTORY_COLUMNS,
    "leader_elections": LEADER_ELECTIONS_COLUMNS,
    "offline_partitions": OFFLINE_PARTITIONS_COLUMNS,
}

# state_as_of's columns besides `as_of_offset`: the image's state, and for brokers
# the broker_history state (UNREGISTERED brokers are left out).
BROKER_AS_OF_COLUMNS = (*BROKER_STATE_KEYS, "state")
PARTITION_AS_OF_COLUMNS = PARTITION_STATE_KEYS
