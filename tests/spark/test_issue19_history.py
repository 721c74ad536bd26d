"""History of reassignments, leader balancing and eligible leader replicas (issue 19).

A small story driven through the real QuorumController (records, then replay):
a reassignment whose leader is removed, a fenced broker that comes back and is
given its preferred leadership by the balancer, a partition whose whole ISR is
fenced and that elects an eligible leader replica cleanly, and an admin unclean
election. Its leader_elections rows carry the causes REASSIGNMENT and REBALANCE
and the election types ISR, ELR and UNCLEAN, and the DataFrame-window reference
(history.build_tables), the vectorised one-process replay and the segment-parallel
job write the same tables row for row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kraft.controller.quorum_controller import ControllerResult
from kraft.controller.requests import (
    AlterPartitionRequest,
    ElectLeadersRequest,
    parse_reassignment_plan,
)
from spark_replay import history as H
from spark_replay.cli import run_job
from spark_replay.datasource import read_log
from spark_replay.tables import TABLE_COLUMNS
from tests.spark.logs import Batch, images_by_offset, write_log
from tests.unit.controller.harness import Harness

BROKERS = (1, 2, 3, 4)


class Story:
    """The harness's controller, its records grouped one batch per command."""

    def __init__(self) -> None:
        self.h = Harness()
        self.now = 0
        self.batches: list[Batch] = []
        self._mark = 0
        self._cut()

    def _cut(self) -> None:
        records = [r for _, r in self.h.log[self._mark :]]
        self._mark = len(self.h.log)
        if records:
            self.batches.append((1, 1000 + len(self.batches), records, False))

    def run(self, result: ControllerResult | None) -> Any:
        res = self.h.apply(result)
        self._cut()
        return res

    def tick(self) -> int:
        self.now += 10_000
        return self.now

    def heartbeat_all(self, *but: int) -> None:
        for b in BROKERS:
            reg = self.h.c.image.brokers.get(b)
            if b not in but and reg is not None and not reg.fenced:
                self.h.heartbeat(b, self.now)
        self._cut()

    def fence(self, victim: int) -> None:
        """`victim` misses its heartbeats: the controller fences it (alone)."""
        self.tick()
        self.heartbeat_all(victim)
        self.run(self.h.c.maybe_fence_stale_broker(self.now + 9_001))
        assert self.h.c.image.brokers[victim].fenced

    def unfence(self, broker: int) -> None:
        self.h.heartbeat(broker, self.tick())
        self._cut()
        assert not self.h.c.image.brokers[broker].fenced

    def alter_isr(self, topic: str, pid: int, isr: list[int]) -> None:
        """The partition leader's AlterPartition."""
        t = self.h.c.image.topic_by_name(topic)
        p = t.partitions[pid]
        epochs = {b: self.h.c.image.brokers[b].broker_epoch for b in BROKERS}
        body = {
            "broker_id": p.leader,
            "broker_epoch": epochs[p.leader],
            "topic_id": t.topic_id,
            "partition_id": pid,
            "leader_epoch": p.leader_epoch,
            "partition_epoch": p.partition_epoch,
            "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": epochs[b]} for b in isr],
        }
        self.run(self.h.c.alter_partition(AlterPartitionRequest.parse(body), self.now))


def build_story() -> list[Batch]:
    s = Story()
    for b in BROKERS:
        s.h.unfenced_broker(b)
    s._cut()
    s.h.create_topic("m", [[1, 2, 3], [2, 3, 1]])
    s.h.create_topic("r", [[1, 2, 3]], **{"min.insync.replicas": "2"})
    s.h.create_topic("u", [[3, 4]])
    s._cut()
    # KIP-455: m-0 moves from {1,2,3} to {4,2,3}; the leader 1 is being removed
    plan = parse_reassignment_plan(
        {"version": 1, "partitions": [{"topic": "m", "partition": 0, "replicas": [4, 2, 3]}]}
    )
    s.run(s.h.c.alter_partition_reassignments(plan, s.tick()))
    s.alter_isr("m", 0, [1, 2, 3, 4])  # the new replica caught up: completed
    m0 = s.h.partition("m", 0)
    assert m0.replicas == (4, 2, 3) and m0.leader != 1
    # balancing: 2 is fenced (m-1 moves to 3), comes back, rejoins the ISR, and the
    # controller gives it its preferred leadership back
    s.fence(2)
    assert s.h.partition("m", 1).leader == 3
    s.unfence(2)
    s.alter_isr("m", 1, [3, 1, 2])
    s.alter_isr("r", 0, [1, 3, 2])
    while (res := s.h.c.maybe_balance_partition_leaders(s.now)) is not None:
        s.run(res)
        if not res.reply["more"]:
            break
    assert s.h.partition("m", 1).leader == 2
    # KIP-966: r's ISR is fenced down to nothing; 2 stays eligible and is elected
    # cleanly when it returns
    s.fence(3)
    s.fence(2)
    s.fence(1)
    r = s.h.partition("r", 0)
    assert r.leader == -1 and 2 in r.elr, r
    s.unfence(2)
    assert s.h.partition("r", 0).leader == 2
    # an admin unclean election: u-0 [3, 4] lost 3 then 4 (its last ISR member); 3
    # comes back outside its ISR and ELR, and only an unclean election elects it
    s.unfence(3)
    s.fence(4)
    assert s.h.partition("u", 0).leader == -1
    s.run(s.h.c.elect_leaders(ElectLeadersRequest("u", 0, "unclean"), s.tick()))
    assert s.h.partition("u", 0).leader == 3
    return s.batches


@pytest.fixture(scope="module")
def story() -> list[Batch]:
    return build_story()


@pytest.fixture(scope="module")
def story_dir(story: list[Batch], tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("issue19")
    write_log(data, story, segment_bytes=2000)
    return data


@pytest.fixture(scope="module")
def outputs(spark: Any, story_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The story's tables from the one-process replay (`one`) and the job (`job`)."""
    from spark_replay.one_process import write_tables

    out = tmp_path_factory.mktemp("issue19-out")
    write_tables(story_dir, out / "one")
    run_job(spark, story_dir, out / "job", report=False)
    return out


@pytest.fixture(scope="module")
def reference(spark: Any, story_dir: Path) -> Any:
    return H.build_tables(spark, read_log(spark, story_dir))


def test_elections_carry_reassignment_rebalance_and_election_types(reference: Any) -> None:
    rows = reference.leader_elections.collect()
    causes = {r["cause"] for r in rows}
    assert {"REASSIGNMENT", "REBALANCE", "FENCE", "UNFENCE", "CREATE"} <= causes, causes
    by_type = {r["election_type"] for r in rows}
    assert {"ISR", "ELR", "UNCLEAN", None} <= by_type, by_type
    unclean = [r for r in rows if r["unclean"]]
    assert [(r["topic"], r["new_leader"], r["election_type"]) for r in unclean] == [
        ("u", 3, "UNCLEAN")
    ]
    elr = [r for r in rows if r["election_type"] == "ELR"]
    assert [(r["topic"], r["new_leader"], r["unclean"]) for r in elr] == [("r", 2, False)]
    moved = [r for r in rows if r["cause"] == "REASSIGNMENT"]
    assert [(r["topic"], r["partition_id"], r["old_leader"]) for r in moved] == [("m", 0, 1)]
    back = [r for r in rows if r["cause"] == "REBALANCE"]
    assert [(r["topic"], r["partition_id"], r["new_leader"]) for r in back] == [("m", 1, 2)]
    history = reference.partition_history.collect()
    assert any(r["adding_replicas"] == [4] and r["removing_replicas"] == [1] for r in history)


def test_one_process_and_segment_parallel_replays_write_the_reference_tables(
    spark: Any, reference: Any, outputs: Path
) -> None:
    for table, cols in TABLE_COLUMNS.items():
        theirs = sorted(map(tuple, getattr(reference, table).select(*cols).collect()), key=repr)
        assert theirs, table
        for out in ("one", "job"):
            ours = spark.read.parquet(str(outputs / out / table)).select(*cols).collect()
            assert sorted(map(tuple, ours), key=repr) == theirs, (out, table)


def test_partition_history_holds_the_images_elr_at_every_offset(
    spark: Any, reference: Any, outputs: Path, story: list[Batch]
) -> None:
    """KIP-966's lists as MetadataImage's PartitionRegistration holds them
    (min.insync.replicas=2 and fences: r-0's ISR shrinks into its ELR), in the
    reference and in the vectorised replays' partition_history, at every offset."""
    brokers = reference.broker_history.collect()
    histories = {
        "reference": reference.partition_history.collect(),
        **{
            out: spark.read.parquet(str(outputs / out / "partition_history")).collect()
            for out in ("one", "job")
        },
    }
    r0 = [row for row in histories["reference"] if row["topic"] == "r"]
    # the ISR shrank below min.insync.replicas into the ELR, then the last ISR
    # member's fence left r-0 leaderless with 2 still eligible and a last known ELR
    assert any(row["elr"] and not row["last_known_elr"] for row in r0), r0
    assert any(row["leader"] == -1 and 2 in row["elr"] and row["last_known_elr"] for row in r0)
    images = images_by_offset(story)
    checked = 0
    for off, image in images.items():
        want = H.image_state(image)
        if not want[1]:
            continue  # before the first partition
        for name, rows in histories.items():
            assert H.state_from_intervals(brokers, rows, off)[1] == want[1], (name, off)
        checked += any(p["elr"] or p["last_known_elr"] for p in want[1])
    assert checked, "no offset with an ELR in the story"


def test_the_summary_counts_reassignments_and_rebalances(
    spark: Any, reference: Any, story_dir: Path
) -> None:
    from spark_replay.report import key_facts, summarize

    summary = summarize(read_log(spark, story_dir), reference)
    assert summary["reassignments"] == {"started": 1, "ended": 1, "in_progress_at_end": 0}
    assert summary["elections"]["rebalances"] == 1
    assert summary["elections"]["by_cause"]["REASSIGNMENT"] == 1
    facts = dict(key_facts(summary))
    assert facts["Preferred-leader rebalances"] == "1"
    assert facts["Reassignments started / ended"].startswith("1 / 1")
