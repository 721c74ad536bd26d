"""The `__cluster_metadata` log: records and their codec (records), checksummed batches
(batch), the segmented file log with its sparse index, leader-epoch cache and recovery
point (file_log, epoch_cache, checkpoints), snapshots (snapshot), and the one MetadataImage
replay (image, replay) that the controller, the broker agent and Spark all use.
The byte layout is in docs/log-format.md."""
