"""A pure test harness: a controller whose results are appended to an in-memory log."""

from __future__ import annotations

import random
import uuid

from kraft.controller.quorum_controller import ControllerConfig, ControllerResult, QuorumController
from kraft.controller.requests import (
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    CreateTopicRequest,
    IsrMember,
    RegisterBrokerRequest,
)
from metadata_log.records import Endpoint, MetadataRecord

CLUSTER = "test-cluster"


class Harness:
    def __init__(
        self,
        session_timeout_ms: int = 9000,
        seed: int = 1,
        elr: bool = True,
        min_insync_replicas: int = 1,
    ) -> None:
        # elr=False: a cluster bootstrapped with eligible.leader.replicas.version=0
        # (Kafka 3.x semantics: the last ISR member stays in the ISR)
        self.config = ControllerConfig(
            node_id=3000,
            controller_ids=frozenset({3000, 3001, 3002}),
            cluster_id=CLUSTER,
            session_timeout_ms=session_timeout_ms,
            min_insync_replicas=min_insync_replicas,
            bootstrap_eligible_leader_replicas_version=1 if elr else 0,
        )
        self.c = QuorumController(self.config, random.Random(seed))
        self.log: list[tuple[int, MetadataRecord]] = []
        self.c.activate(0)
        self.apply(ControllerResult(tuple(self.c.bootstrap_records())))
        self.incarnations: dict[int, str] = {}

    @property
    def next_offset(self) -> int:
        return len(self.log)

    def apply(self, result: ControllerResult | None) -> ControllerResult | None:
        if result is None:
            return None
        result = result.drained()
        # one write, one batch: replayed as the shell replays a committed batch
        base = self.next_offset
        self.log.extend((base + i, rec) for i, rec in enumerate(result.records))
        if result.records:
            self.c.replay_batch(base, list(result.records))
        return result

    def register(
        self,
        broker_id: int,
        now: int = 0,
        rack: str | None = None,
        incarnation: str | None = None,
        previous_broker_epoch: int = -1,
    ) -> int:
        inc = incarnation or str(uuid.UUID(int=broker_id * 1000 + len(self.log)))
        self.incarnations[broker_id] = inc
        req = RegisterBrokerRequest(
            broker_id,
            CLUSTER,
            inc,
            (Endpoint("PLAINTEXT", "h", 9092),),
            rack,
            (),
            previous_broker_epoch,
        )
        res = self.apply(self.c.register_broker(req, now, self.next_offset))
        return res.reply["broker_epoch"]

    def heartbeat(
        self,
        broker_id: int,
        now: int,
        offset: int | None = None,
        want_shutdown: bool = False,
        want_fence: bool = False,
    ) -> dict:
        epoch = self.c.image.brokers[broker_id].broker_epoch
        req = BrokerHeartbeatRequest(
            broker_id,
            epoch,
            self.next_offset if offset is None else offset,
            want_fence,
            want_shutdown,
        )
        return self.apply(self.c.heartbeat(req, now)).reply

    def unfenced_broker(self, broker_id: int, now: int = 0, rack: str | None = None) -> int:
        epoch = self.register(broker_id, now, rack)
        reply = self.heartbeat(broker_id, now)
        assert not reply["is_fenced"]
        return epoch

    def create_topic(
        self, name: str, assignments: list[list[int]], now: int = 0, **configs: str
    ) -> str:
        req = CreateTopicRequest(
            name, None, None, tuple(tuple(a) for a in assignments), dict(configs)
        )
        return self.apply(self.c.create_topic(req, now)).reply["topic_id"]

    def alter_isr(self, name: str, pid: int, isr: list[int], now: int = 0) -> ControllerResult:
        """AlterPartition from the partition's leader, at its current epochs."""
        p = self.partition(name, pid)
        brokers = self.c.image.brokers
        req = AlterPartitionRequest(
            broker_id=p.leader,
            broker_epoch=brokers[p.leader].broker_epoch,
            topic_id=self.c.image.topic_ids_by_name[name],
            partition_id=pid,
            leader_epoch=p.leader_epoch,
            partition_epoch=p.partition_epoch,
            new_isr_with_epochs=tuple(IsrMember(b, brokers[b].broker_epoch) for b in isr),
            leader_recovery_state=p.leader_recovery_state,
        )
        return self.apply(self.c.alter_partition(req, now))

    def fence(self, broker_id: int, now: int = 0) -> ControllerResult:
        """The broker asks to be fenced: the production fence path."""
        self.heartbeat(broker_id, now, want_fence=True)
        assert self.c.image.brokers[broker_id].fenced
        return ControllerResult(())

    def partition(self, name: str, pid: int):
        return self.c.image.topic_by_name(name).partitions[pid]

    def records_since(self, offset: int) -> list[MetadataRecord]:
        return [r for o, r in self.log if o >= offset]
