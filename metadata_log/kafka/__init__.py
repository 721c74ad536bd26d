"""Apache Kafka's own `__cluster_metadata` format (record batch v2, magic 2), read beside the native one.

`batch` parses and verifies batches, `message` decodes Kafka's message
serialization from the generated `schemas` tables (`compiled` is the same as
generated code, the hot path), `record_serde` frames metadata and control records and
maps them onto `metadata_log.records`, `reader` walks a segment, snapshot or log
folder, `replay` builds a MetadataImage from a Kafka folder, and `writer` writes
a native story in Kafka's format. docs/kafka-log-format.md has the details.
"""
