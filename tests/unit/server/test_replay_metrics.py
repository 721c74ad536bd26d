"""ReplayMetrics, the active controller's replay observer: it counts the fences and
partition leader elections replayed, and logs each state change (one summary line
for the partitions of a large batch); a standby's replay tells it nothing."""

from __future__ import annotations

import logging

import pytest

from kraft.controller.quorum_controller import ControllerResult
from kraft.controller.requests import CreateTopicRequest
from kraft.server.metrics import ControllerMetrics
from kraft.server.replay_metrics import STATE_CHANGE_DETAIL_MAX, ReplayMetrics
from tests.unit.controller.harness import Harness


def _observed(h: Harness) -> ControllerMetrics:
    metrics = ControllerMetrics(dict)
    h.c.observer = ReplayMetrics(metrics)
    return metrics


def _replay(h: Harness, result: ControllerResult | None) -> ControllerResult | None:
    """Replay a result as the shell does: one batch through replay_batch."""
    if result is None:
        return None
    result = result.drained()
    base = h.next_offset
    h.log.extend(enumerate(result.records, base))
    h.c.replay_batch(base, result.records)
    return result


def _count(metrics: ControllerMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_fences_and_clean_elections_of_the_active_controller_are_counted() -> None:
    h = Harness(session_timeout_ms=1000)
    for b in (1, 2, 3):
        h.unfenced_broker(b)
    h.create_topic("t", [[1, 2, 3], [1, 3, 2], [2, 3, 1]])
    metrics = _observed(h)
    h.heartbeat(2, 900)
    h.heartbeat(3, 900)
    fence = _replay(h, h.c.maybe_fence_stale_broker(1500))  # broker 1 led two partitions
    assert fence is not None and fence.reply["fenced_broker"] == 1
    assert _count(metrics, "kafka_controller_controllerstats_brokerfences_total") == 1
    elections = "kafka_controller_controllerstats_leaderelections_total"
    assert _count(metrics, elections, unclean="false") == 2
    assert _count(metrics, elections, unclean="true") == 0


def test_a_standby_replay_is_not_counted() -> None:
    h = Harness(session_timeout_ms=1000)
    for b in (1, 2):
        h.unfenced_broker(b)
    h.create_topic("t", [[1, 2]])
    metrics = _observed(h)
    h.heartbeat(2, 900)
    result = h.c.maybe_fence_stale_broker(1500)
    h.c.deactivate(h.next_offset - 1)  # a standby now: replays what commits
    _replay(h, result)
    assert h.c.image.brokers[1].fenced
    assert _count(metrics, "kafka_controller_controllerstats_brokerfences_total") == 0


@pytest.mark.parametrize("partitions", [2, STATE_CHANGE_DETAIL_MAX + 1])
def test_a_large_batch_logs_one_summary_line_for_its_partitions(
    partitions: int, caplog: pytest.LogCaptureFixture
) -> None:
    h = Harness()
    for b in (1, 2):
        h.unfenced_broker(b)
    _observed(h)
    caplog.set_level(logging.INFO, logger="kraft.state_change")
    req = CreateTopicRequest("big", None, None, ((1, 2),) * partitions, {})
    _replay(h, h.c.create_topic(req, 0))
    changes = [r.__dict__.get("change") for r in caplog.records]
    assert changes[0] == "topic_created"
    if partitions <= STATE_CHANGE_DETAIL_MAX:
        assert changes[1:] == ["partition_created"] * partitions
        # a topic created earlier in the batch is named in its partitions' lines
        assert {r.__dict__.get("topic") for r in caplog.records[1:]} == {"big"}
    else:
        assert changes[1:] == ["partitions_changed"]
        assert caplog.records[1].__dict__["partition_created"] == partitions
