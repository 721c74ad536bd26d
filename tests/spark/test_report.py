"""The summary's reading of the end of a log: was the cluster stopped, and since when."""

from __future__ import annotations

from typing import Any

from spark_replay.report import cluster_stop, key_facts

N = None


def rows(*spec: tuple[int, str, int, int | None]) -> list[dict[str, Any]]:
    """broker_history rows from (broker_id, state, start_offset, end_offset); time = offset."""
    return [
        {"broker_id": b, "state": s, "start_offset": o, "end_offset": e, "start_time_ms": o}
        for b, s, o, e in spec
    ]


def test_a_running_broker_at_the_end_is_no_stop() -> None:
    assert cluster_stop(rows((1, "FENCED", 0, 2), (1, "UNFENCED", 2, N))) is None


def test_no_broker_ever_ran_is_no_stop() -> None:
    assert cluster_stop(rows((1, "FENCED", 0, N), (2, "FENCED", 1, N))) is None


def test_stop_starts_with_the_first_broker_down_after_the_last_unfence() -> None:
    history = rows(
        # broker 1 crashes early and comes back at 50: part of the running time
        (1, "FENCED", 0, 2),
        (1, "UNFENCED", 2, 10),
        (1, "FENCED", 10, 50),
        (1, "UNFENCED", 50, 70),
        (1, "CONTROLLED_SHUTDOWN", 70, 72),
        (1, "FENCED", 72, N),
        # broker 2 is the first down after offset 50
        (2, "FENCED", 1, 3),
        (2, "UNFENCED", 3, 60),
        (2, "CONTROLLED_SHUTDOWN", 60, 61),
        (2, "FENCED", 61, N),
        # broker 3 crashed (fenced by session expiry) during the stop
        (3, "FENCED", 4, 5),
        (3, "UNFENCED", 5, 65),
        (3, "FENCED", 65, N),
    )
    assert cluster_stop(history) == {
        "offset": 60,
        "time_ms": 60,
        "brokers_left_by": {"CONTROLLED_SHUTDOWN": 2, "FENCED": 1},
    }


def test_key_facts_of_a_stopped_cluster_name_the_running_peak() -> None:
    window = {
        "topic": "t",
        "topic_id": "id",
        "partition_id": 3,
        "start_offset": 5,
        "end_offset": 9,
        "start_time": "2026-01-01T00:00:00.000+00:00",
        "duration_ms": 2500,
        "still_open": False,
    }
    summary = {
        "log": {
            "record_count": 1000,
            "first_offset": 0,
            "last_offset": 999,
            "first_time": "a",
            "last_time": "b",
            "duration_s": 60,
        },
        "brokers": {"fences": 3, "unfences": 2, "controlled_shutdowns": 3},
        "elections": {"clean": 7, "unclean": 1, "busiest_minute": None},
        "offline": {
            "max_offline_at_once": 9,
            "max_offline_at_offset": 990,
            "longest_window": None,
            "while_running": {"max_offline_at_once": 2, "longest_window": window},
        },
        "at_end": {
            "topics": 2,
            "partitions": 9,
            "offline_partitions": 9,
            "brokers_running": 0,
            "note": "No broker is running at the end of the log: the cluster was stopped",
        },
    }
    facts = dict(key_facts(summary))
    assert facts["Most partitions offline at once"] == (
        "2 while the cluster ran (9 counting the final stop)"
    )
    assert facts["Longest offline window while running"] == (
        "t-3: 2.5 s, from offset 5 (2026-01-01T00:00:00.000+00:00) until offset 9"
    )
    assert facts["Note"].startswith("No broker is running")


def test_elections_are_bucketed_so_a_few_second_log_still_has_bars() -> None:
    from spark_replay.report import _election_bucket_ms, _per_text

    assert (_election_bucket_ms(4_000), _per_text(1_000)) == (1_000, "per 1 s")
    assert _election_bucket_ms(40_000) == 5_000  # 8 bars, not one minute-wide bar
    assert _election_bucket_ms(120_000) == 15_000
    assert (_election_bucket_ms(3_600_000), _per_text(60_000)) == (60_000, "per minute")


def test_every_election_cause_has_a_color_of_its_own() -> None:
    # the elections chart stacks causes: two sharing a color read as one
    from spark_replay.report import CAUSE_COLORS
    from spark_replay.segment_replay import CAUSES

    causes = set(CAUSES.to_pylist())
    assert causes <= set(CAUSE_COLORS), causes - set(CAUSE_COLORS)
    plotted = [CAUSE_COLORS[c] for c in causes]
    assert len(set(plotted)) == len(plotted), CAUSE_COLORS


def test_each_line_is_drawn_its_own_way() -> None:
    # up to as many brokers as the leaders chart plots, and the what-if plot's
    # actual history (thick, black) before its scenarios: no two lines alike
    from spark_replay.report import MAX_PLOTTED_BROKERS, distinct_line_styles, whatif_line_styles

    for n in (1, 10, 11, 41, MAX_PLOTTED_BROKERS):
        styles = distinct_line_styles(n)
        assert len(styles) == n and len(set(styles)) == n, styles
    assert whatif_line_styles(0) == []
    assert whatif_line_styles(1) == [("black", "-", 2.2)]
    for n in (2, 9, 12, MAX_PLOTTED_BROKERS):
        styles = whatif_line_styles(n)
        assert len(styles) == n
        assert len({(c, s) for c, s, _ in styles}) == n, styles


def _whatif_summary(scenarios: int) -> dict[str, Any]:
    def line(name: str, offline: int) -> dict[str, Any]:
        metrics = {
            "offline_partition_seconds": 1.5 * offline,
            "max_offline_at_once": offline,
            "partitions_ever_offline": offline,
            "unclean_elections": 0,
            "unclean_partitions": 0,
            "leadership_moves": 3,
            "elections": 4,
            "unclean_at": [],
            "offline_seconds_by_topic": {"payments": 1.5 * offline},
            "offline_series": [[1000, 0], [2000, offline], [3000, 0]],
        }
        return {"name": name, "metrics": metrics}

    return {
        "first_time_ms": 1000,
        "last_time_ms": 4000,
        "actual": line("actual", 2),
        "scenarios": [line(f"session={i}", i % 3) for i in range(scenarios)],
        "identity": {"holds": True, "tables": {}},
        "in_force": {"unclean.leader.election.enable": False, "broker.session.timeout.ms": 9000},
    }


def test_the_what_if_section_of_a_wide_grid_scrolls_inside_its_boxes() -> None:
    from spark_replay.report import whatif_section_html

    page = whatif_section_html(_whatif_summary(12))
    # both tables and the plot sit in boxes that scroll sideways: the page does not
    assert page.count('<div style="overflow-x:auto"><table>') == 2
    assert '<div style="overflow-x:auto"><img style="max-width:100%"' in page
    assert page.count("<th>session=") == 2 * 12
    # settings are spelled as Kafka's configs spell them
    assert "unclean.leader.election.enable=false" in page
    assert "=False" not in page
