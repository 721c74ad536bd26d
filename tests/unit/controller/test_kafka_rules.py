"""Small rules where the controller read its input otherwise than Kafka's: a topic
name with a final newline, and a boolean config in another case."""

from __future__ import annotations

import pytest

from kraft.controller.errors import ApiError
from kraft.controller.requests import AlterConfigsRequest, CreateTopicRequest
from tests.unit.controller.harness import Harness


@pytest.mark.parametrize("name", ["orders\n", "orders\r", "\norders", "or ders"])
def test_a_topic_name_is_only_kafka_s_characters(name: str) -> None:
    """`re.match` with `$` took "orders\\n" (a topic no Kafka tool can name)."""
    h = Harness()
    h.unfenced_broker(1)
    with pytest.raises(ApiError) as e:
        h.c.create_topic(CreateTopicRequest(name, 1, 1, None, {}), 0)
    assert e.value.code == "INVALID_TOPIC_EXCEPTION"
    assert h.c.image.topic_by_name(name) is None


@pytest.mark.parametrize("value", ["TRUE", "True", " true "])
def test_a_boolean_config_is_read_in_any_case_as_kafka_s_configdef(value: str) -> None:
    """ "TRUE" was refused (INVALID_CONFIG); stored, it elects as "true" does."""
    h = Harness()
    for b in (1, 2):
        h.unfenced_broker(b)
    h.create_topic("t", [[1, 2]])
    h.fence(2)
    h.fence(1)  # the ISR was [1]: offline
    assert h.partition("t", 0).leader == -1
    h.heartbeat(2, 0)  # broker 2 back, out of the ISR
    assert h.partition("t", 0).leader == -1
    req = AlterConfigsRequest("t", {"unclean.leader.election.enable": value})
    h.apply(h.c.alter_configs(req, 0))
    assert h.partition("t", 0).leader == 2  # enabling it elects at once (unclean)


def test_a_boolean_config_still_refuses_other_words() -> None:
    h = Harness()
    h.unfenced_broker(1)
    h.create_topic("t", [[1]])
    with pytest.raises(ApiError) as e:
        h.c.alter_configs(AlterConfigsRequest("t", {"unclean.leader.election.enable": "yes"}), 0)
    assert e.value.code == "INVALID_CONFIG"


def test_a_broker_must_support_every_finalized_feature_it_lists() -> None:
    """Only metadata.version was checked: a broker without ELR support (0..0)
    registered into a cluster at eligible.leader.replicas.version 1."""
    from kraft.controller.requests import RegisterBrokerRequest
    from metadata_log.records import BrokerFeature, Endpoint
    from tests.unit.controller.harness import CLUSTER

    h = Harness(elr=True)
    assert h.c.image.features["eligible.leader.replicas.version"] == 1

    def register(broker_id: int, *features: BrokerFeature) -> None:
        inc = f"00000000-0000-0000-0000-00000000000{broker_id}"
        req = RegisterBrokerRequest(
            broker_id, CLUSTER, inc, (Endpoint("PLAINTEXT", "h", 9092),), None, features, -1
        )
        h.apply(h.c.register_broker(req, 0, h.next_offset))

    with pytest.raises(ApiError, match="supports eligible.leader.replicas.version 0-0, the "):
        register(7, BrokerFeature("eligible.leader.replicas.version", 0, 0))
    assert 7 not in h.c.image.brokers
    with pytest.raises(ApiError, match="supports some.new.feature 1-2, the cluster is at 0"):
        register(8, BrokerFeature("some.new.feature", 1, 2))
    register(9, BrokerFeature("eligible.leader.replicas.version", 0, 1))
    assert 9 in h.c.image.brokers


def test_a_fenced_broker_counts_for_the_replication_factor_and_comes_last() -> None:
    """Creating rf=3 with one of three brokers fenced (a rolling restart) was
    refused; Kafka places it, the fenced broker after the unfenced ones."""
    h = Harness()
    for b in (1, 2, 3):
        h.unfenced_broker(b)
    h.fence(2)
    h.apply(h.c.create_topic(CreateTopicRequest("t", 6, 3, None, {}), 0))
    for pid in range(6):
        p = h.partition("t", pid)
        assert sorted(p.replicas) == [1, 2, 3] and p.replicas[-1] == 2, p
        assert 2 not in p.isr and p.leader in (1, 3)
    with pytest.raises(ApiError, match="larger than the 3 registered brokers"):
        h.c.create_topic(CreateTopicRequest("u", 1, 4, None, {}), 0)
    h.fence(1)
    h.fence(3)
    with pytest.raises(ApiError, match="all brokers are currently fenced"):
        h.c.create_topic(CreateTopicRequest("u", 1, 2, None, {}), 0)
