"""Scenario parsing: every bad --set, --in-force, --racks or grid is one clear
line naming the problem, and the CLI exits 2 before any Spark session starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_replay.whatif import scenario as S
from spark_replay.whatif.scenario import ScenarioError, build_scenarios


def test_no_set_gives_only_the_in_force_scenario_with_kafkas_defaults() -> None:
    [s] = build_scenarios([])
    assert (s.name, s.unclean, s.session_timeout_ms, s.controlled_shutdown, s.placement) == (
        S.IN_FORCE,
        False,
        9000,
        True,
        "actual",
    )


def test_set_values_apply_on_top_of_the_in_force_ones() -> None:
    base, s = build_scenarios(
        ["unclean.leader.election.enable=true"], in_force=["broker.session.timeout.ms=6000"]
    )
    assert (base.session_timeout_ms, base.unclean, base.changed) == (6000, False, ())
    assert (s.session_timeout_ms, s.unclean, s.changed) == (6000, True, (S.UNCLEAN,))
    assert s.name == "unclean.leader.election.enable=true"


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        (["no.such.key=1"], "unknown key 'no.such.key'"),
        (["unclean.leader.election.enable=yes"], "'yes' is not true or false"),
        (["broker.session.timeout.ms=soon"], "'soon' is not an integer"),
        (["broker.session.timeout.ms=0"], "must be >= 1"),
        (["replica.placement=random"], "not one of actual, rack-aware, rack-unaware"),
        (["unclean.leader.election.enable"], "is not KEY=VALUE"),
        (["min.insync.replicas=0"], "min.insync.replicas: '0' must be >= 1"),
        (["eligible.leader.replicas.enable=maybe"], "'maybe' is not true or false"),
    ],
)
def test_a_bad_set_names_the_problem(sets: list[str], needle: str) -> None:
    with pytest.raises(ScenarioError, match=needle.replace("(", r"\(")):
        build_scenarios(sets)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{not json", "not JSON"),
        ("[]", "non-empty list"),
        ('{"x": 1}', "non-empty list"),
        ('[{"set": {"broker.session.timeout.ms": "x"}}]', "scenario 0: broker.session"),
        ('[{"set": 3}]', "scenario 0 is not"),
        ('[{"sets": {}}]', "unknown fields"),
        ('[{"name": "a", "set": {}}, {"name": "a", "set": {}}]', "names must differ"),
    ],
)
def test_a_malformed_grid_names_the_problem(tmp_path: Path, text: str, needle: str) -> None:
    grid = tmp_path / "grid.json"
    grid.write_text(text)
    with pytest.raises(ScenarioError, match=needle):
        build_scenarios([], grid=grid)


def test_a_grid_runs_each_scenario_on_top_of_set(tmp_path: Path) -> None:
    grid = tmp_path / "grid.json"
    grid.write_text(
        json.dumps(
            {
                "scenarios": [
                    {"set": {"unclean.leader.election.enable": True}},
                    {"name": "long", "set": {"broker.session.timeout.ms": 30000}},
                ]
            }
        )
    )
    base, a, b = build_scenarios(["controlled.shutdown.enable=false"], grid=grid)
    assert base.controlled_shutdown and not a.controlled_shutdown and not b.controlled_shutdown
    assert (a.name, a.unclean) == (
        "controlled.shutdown.enable=false,unclean.leader.election.enable=true",
        True,
    )
    assert (b.name, b.session_timeout_ms) == ("long", 30000)


def test_racks_parse_and_refuse_bad_items() -> None:
    assert S.parse_racks("1=a,2=a,3=b") == {1: "a", 2: "a", 3: "b"}
    with pytest.raises(ScenarioError, match="'x=a' is not BROKER_ID=RACK"):
        S.parse_racks("1=a,x=a")
    with pytest.raises(ScenarioError, match="broker 1 is given twice"):
        S.parse_racks("1=a,1=b")


@pytest.mark.parametrize(
    "extra",
    [
        ["--set", "no.such=1"],
        ["--set", "broker.session.timeout.ms=-5"],
        ["--grid", "MISSING"],
        ["--grid", "BAD"],
    ],
)
def test_the_cli_exits_2_with_one_line_before_spark_starts(
    tmp_path: Path, extra: list[str], capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:  # noqa: ANN001
    import spark_replay.session as session
    from spark_replay.cli import main

    def no_spark(*_a: object, **_k: object) -> None:
        raise AssertionError("Spark started")

    monkeypatch.setattr(session, "build_session", no_spark)
    (tmp_path / "bad.json").write_text('[{"set": {"replica.placement": 1}}]')
    extra = [
        str(tmp_path / "missing.json")
        if x == "MISSING"
        else str(tmp_path / "bad.json")
        if x == "BAD"
        else x
        for x in extra
    ]
    code = main(["what-if", "--log-dir", str(tmp_path), "--out", str(tmp_path / "o"), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("spark-replay what-if: error: "), err


def test_a_rack_aware_scenario_without_racks_is_refused_before_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from spark_replay.cli import main
    from tests.unit.whatif.story import Story

    s = Story(tmp_path / "log")
    s.register(1)
    s.close()
    code = main(
        [
            "what-if",
            "--log-dir",
            str(tmp_path / "log"),
            "--out",
            str(tmp_path / "o"),
            "--set",
            "replica.placement=rack-aware",
        ]
    )
    assert code == 2
    assert "needs a rack for brokers [1]" in capsys.readouterr().err
