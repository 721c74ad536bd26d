"""kraft reassign-partitions: its JSON files, proposals and --verify lines (pure parts)."""

from __future__ import annotations

import random

import pytest

from kraft.tools.reassign import (
    PlanError,
    parse_broker_list,
    parse_plan,
    parse_topics_to_move,
    plan_json,
    propose,
    verify_lines,
)


def test_a_kafka_plan_file_is_read_with_its_log_dirs_dropped() -> None:
    doc = {
        "version": 1,
        "partitions": [
            {"topic": "foo", "partition": 0, "replicas": [4, 5, 6], "log_dirs": ["any"] * 3}
        ],
    }
    assert parse_plan(doc) == [{"topic": "foo", "partition": 0, "replicas": [4, 5, 6]}]


@pytest.mark.parametrize(
    ("doc", "names"),
    [
        ([], "JSON object"),
        ({"version": 2, "partitions": []}, "version"),
        ({"version": 1}, "partitions"),
        ({"partitions": [{"partition": 0, "replicas": [1]}]}, "topic"),
        ({"partitions": [{"topic": "a", "partition": -1, "replicas": [1]}]}, "partition"),
        ({"partitions": [{"topic": "a", "partition": 0, "replicas": ["1"]}]}, "replicas"),
        ({"partitions": [{"topic": "a", "partition": 0, "replicas": None}]}, "replicas"),
        (
            {"partitions": [{"topic": "a", "partition": 0, "replicas": [1]}] * 2},
            "more than once",
        ),
    ],
)
def test_a_malformed_plan_file_is_refused_naming_the_problem(doc: object, names: str) -> None:
    with pytest.raises(PlanError, match=names):
        parse_plan(doc)


def test_a_cancel_file_may_hold_null_replicas() -> None:
    doc = {"partitions": [{"topic": "a", "partition": 0, "replicas": None}]}
    assert parse_plan(doc, allow_null=True)[0]["replicas"] is None


def test_topics_to_move_and_broker_list_are_parsed_and_checked() -> None:
    assert parse_topics_to_move({"version": 1, "topics": [{"topic": "a"}, {"topic": "a"}]}) == ["a"]
    with pytest.raises(PlanError, match="topics"):
        parse_topics_to_move({"topics": []})
    assert parse_broker_list("4,5,6") == [4, 5, 6]
    for bad in ("", "4,x", "4,4", "-1"):
        with pytest.raises(PlanError, match="broker-list"):
            parse_broker_list(bad)


def test_generate_places_every_partition_on_the_listed_brokers_keeping_its_factor() -> None:
    current = {"foo": [[1, 2, 3]] * 6, "bar": [[1, 2]] * 2}
    plan = propose(current, {4: None, 5: None, 6: None}, random.Random(7))
    assert len(plan) == 8
    for p in plan:
        rf = 3 if p["topic"] == "foo" else 2
        assert len(p["replicas"]) == len(set(p["replicas"])) == rf
        assert set(p["replicas"]) <= {4, 5, 6}
    # leaders spread over the brokers as the controller's placement does
    assert {p["replicas"][0] for p in plan if p["topic"] == "foo"} == {4, 5, 6}


def test_generate_is_rack_aware_when_every_broker_has_a_rack() -> None:
    racks = {4: "a", 5: "a", 6: "b", 7: "b"}
    plan = propose({"foo": [[1, 2]] * 8}, racks, random.Random(3))
    for p in plan:
        assert {racks[b] for b in p["replicas"]} == {"a", "b"}


def test_generate_refuses_mixed_racks_unless_rack_awareness_is_off() -> None:
    brokers = {4: "a", 5: None, 6: "b"}
    with pytest.raises(PlanError, match="rack"):
        propose({"foo": [[1, 2]]}, brokers, random.Random(1))
    assert propose({"foo": [[1, 2]]}, brokers, random.Random(1), rack_aware=False)


def test_generate_refuses_a_factor_above_the_broker_count() -> None:
    with pytest.raises(PlanError, match="replication factor 3"):
        propose({"foo": [[1, 2, 3]]}, {4: None, 5: None}, random.Random(1))


def test_plan_json_is_kafkas_format_sorted() -> None:
    text = plan_json([{"topic": "b", "partition": 0, "replicas": [1]},
                      {"topic": "a", "partition": 1, "replicas": [2, 3]}])  # fmt: skip
    assert text == (
        '{"version":1,"partitions":[{"topic":"a","partition":1,"replicas":[2,3],'
        '"log_dirs":["any","any"]},{"topic":"b","partition":0,"replicas":[1],"log_dirs":["any"]}]}'
    )


def test_verify_reports_completed_in_progress_and_diverged_partitions() -> None:
    plan = [
        {"topic": "a", "partition": 0, "replicas": [4, 5]},
        {"topic": "a", "partition": 1, "replicas": [4, 5]},
        {"topic": "a", "partition": 2, "replicas": [4, 5]},
    ]
    now = {("a", 0): [4, 5], ("a", 1): [1, 2, 4, 5], ("a", 2): [1, 2]}
    lines, done = verify_lines(plan, now, {("a", 1)})
    assert not done
    assert lines[1] == "Reassignment of partition a-0 is completed."
    assert lines[2] == "Reassignment of partition a-1 is still in progress."
    assert "no active reassignment of partition a-2" in lines[3]
    lines, done = verify_lines(plan[:1], now, set())
    assert done
