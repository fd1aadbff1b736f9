"""Scoring: the matching rule, the grace, and every per-kind figure."""

from __future__ import annotations

from typing import Any

import pytest

from trainguard.lab.backtest.scoring import score


def label(i: int, kind: str, start: float, end: float, nodes: list[str], ranks: list[int],
          **extra: Any) -> dict[str, Any]:
    return {"id": f"f{i}", "kind": kind, "start": start, "end": end, "job": "j", "nodes": nodes, "ranks": ranks,
            **extra}


def incident(i: int, kind: str, at: float, nodes: list[str], ranks: list[int], job: str = "j") -> dict[str, Any]:
    return {"id": f"i{i}", "kind": kind, "job": job, "onset": at, "detected_at": at, "nodes": nodes, "ranks": ranks,
            "gpus": [], "evidence": {}}


def test_match_needs_same_kind_job_and_window_with_grace() -> None:
    labels = [label(1, "hang", 100, 200, ["n1"], [3])]
    incs = [incident(1, "hang", 310, ["n1"], [3]),            # inside end + 120 s grace
            incident(2, "hang", 330, ["n1"], [3]),            # too late
            incident(3, "slowdown", 150, ["n1"], []),         # wrong kind
            incident(4, "hang", 150, ["n1"], [3], job="k"),   # wrong job
            incident(5, "hang", 97, ["n1"], [3])]             # before the start, beyond the 2 s skew bound
    s = score(labels, incs, grace_s=120)
    assert s.matches == {"i5": None, "i1": "f1", "i2": None, "i3": None, "i4": None}
    hang = s.per_kind()["hang"]
    assert (hang["recall"], hang["precision"], hang["incidents"]) == (1.0, 0.25, 4)
    assert score(labels, incs, grace_s=200).matches["i2"] == "f1"


def test_a_host_clock_running_behind_may_date_a_detection_just_before_the_start() -> None:
    labels = [label(1, "hw_fault", 100, 200, ["n1"], [])]
    early = [incident(1, "hw_fault", 98.5, ["n1"], [])]  # the node's clock is 1.5 s slow
    assert score(labels, early).matches == {"i1": "f1"}
    assert score(labels, early, skew_s=0.0).matches == {"i1": None}


def test_latency_percentiles_budget_and_localisation() -> None:
    labels = [label(i, "slowdown", 1000 * i, 1000 * i + 600, [f"n{i}"], [i], latency_budget_s=120)
              for i in range(1, 5)]
    incs = [incident(1, "slowdown", 1000 + 30, ["n1"], [1]),
            incident(2, "slowdown", 2000 + 60, ["n2"], []),       # right node, no rank
            incident(3, "slowdown", 3000 + 200, ["n9"], [3]),     # wrong node, late
            incident(4, "slowdown", 3000 + 300, ["n3"], [3])]     # later duplicate: ignored for latency
    row = score(labels, incs).per_kind()["slowdown"]
    assert row["recall"] == 0.75 and row["precision"] == 1.0
    assert row["latency_median_s"] == 60 and row["latency_p95_s"] == pytest.approx(186.0)
    assert row["within_latency_target"] == pytest.approx(2 / 3, abs=1e-3)
    assert (row["node_accuracy"], row["rank_accuracy"], row["localisation_accuracy"]) == (
        pytest.approx(2 / 3, abs=1e-3), pytest.approx(2 / 3, abs=1e-3), pytest.approx(1 / 3, abs=1e-3))
    assert row["false_evictions"] == 1  # n9 was not faulty


def test_false_evictions_count_only_evicting_kinds() -> None:
    incs = [incident(1, "hw_fault", 5, ["n1"], []), incident(2, "loss_spike", 5, ["n1"], []),
            incident(3, "user_error", 5, [], [])]
    per_kind = score([], incs).per_kind()
    assert per_kind["hw_fault"]["false_evictions"] == 1
    assert per_kind["loss_spike"]["false_evictions"] == 0
    assert per_kind["hw_fault"]["precision"] == 0.0 and per_kind["hw_fault"]["recall"] is None


def test_missed_labels_are_listed() -> None:
    s = score([label(1, "nan", 0, 10, [], []), label(2, "nan", 100, 110, [], [])], [incident(1, "nan", 5, [], [])])
    assert s.missed == ["f2"]
    assert s.per_kind()["nan"]["localisation_accuracy"] is None


def test_a_transient_fail_slow_counts_in_no_recall_and_an_incident_on_it_is_an_over_eviction() -> None:
    from trainguard.lab.backtest.scoring import score as score_labels

    labels = [{"id": "blip", "kind": "network", "job": "j", "start": 100.0, "end": 160.0, "nodes": ["n1"],
               "ranks": [], "transient": True},
              {"id": "real", "kind": "network", "job": "j", "start": 1000.0, "end": 1600.0, "nodes": ["n2"],
               "ranks": []}]
    evicted = [{"id": "i1", "kind": "network", "job": "j", "detected_at": 106.0, "nodes": ["n1"]},
               {"id": "i2", "kind": "network", "job": "j", "detected_at": 1130.0, "nodes": ["n2"]}]
    row = score_labels(labels, evicted).per_kind()["network"]
    assert (row["labels"], row["recall"], row["precision"], row["over_evicted"]) == (1, 1.0, 0.5, 1)
    assert row["transient_labels"] == 1 and row["false_incidents"] == 1 and row["f1"] == round(2 * 0.5 / 1.5, 4)
    kept = score_labels(labels, evicted[1:]).per_kind()["network"]
    assert (kept["precision"], kept["over_evicted"], kept["f1"]) == (1.0, 0, 1.0)
