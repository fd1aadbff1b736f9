"""Parameter validation and measured latencies from a backtest report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainguard.lab.ettr_sim.params import (
    DEFAULT_MIX,
    JobParams,
    ParamError,
    SimParams,
    TrainguardCosts,
    with_measured_latencies,
)


def test_default_mix_sums_to_one_and_keeps_byterobust_figures() -> None:
    assert sum(DEFAULT_MIX.values()) == pytest.approx(1.0)
    assert (DEFAULT_MIX["cuda_error"], DEFAULT_MIX["manual_restart"], DEFAULT_MIX["hang"]) == (0.36, 0.17, 0.10)
    assert SimParams().validate().job.gpus == 9600


@pytest.mark.parametrize(("params", "key"), [
    (SimParams(mix={"hang": 1.5}), "mix"),
    (SimParams(mix={"meteor": 1.0}), "mix: unknown"),
    (SimParams(job=JobParams(mfu_drop=1.0)), "job.mfu_drop"),
    (SimParams(job=JobParams(days=0)), "job:"),
])
def test_bad_params_name_the_key(params: SimParams, key: str) -> None:
    with pytest.raises(ParamError, match=key):
        params.validate()


def test_measured_latencies_replace_defaults(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"per_kind": {"hang": {"latency_median_s": 42.5}, "nan": {"latency_median_s": None},
                                               "novel": {"latency_median_s": 1.0}}}))
    costs = with_measured_latencies(TrainguardCosts(), report)
    assert costs.detection_s["hang"] == 42.5
    assert costs.detection_s["nan"] == TrainguardCosts().detection_s["nan"]
    assert "novel" not in costs.detection_s


def test_missing_or_wrong_report_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ParamError, match="not found"):
        with_measured_latencies(TrainguardCosts(), tmp_path / "nope.json")
    (tmp_path / "r.json").write_text("{}")
    with pytest.raises(ParamError, match="per_kind"):
        with_measured_latencies(TrainguardCosts(), tmp_path / "r.json")


@pytest.mark.parametrize(("costs", "key"), [
    (TrainguardCosts(over_evict_nodes=0), "over_evict_nodes"),
    (TrainguardCosts(standby_pool=-1), "standby_pool"),
    (TrainguardCosts(ambiguous_share={"hang": 1.5}), "ambiguous_share"),
    (TrainguardCosts(ambiguous_share={"meteor": 0.5}), "ambiguous_share"),
    (TrainguardCosts(healthy_return_s=-1.0), "healthy_return_s"),
])
def test_bad_eviction_params_name_the_key(costs: TrainguardCosts, key: str) -> None:
    with pytest.raises(ParamError, match=key):
        SimParams(trainguard=costs).validate()


def test_job_borne_kinds_must_be_known() -> None:
    with pytest.raises(ParamError, match="job_borne"):
        SimParams(job_borne=frozenset({"meteor"})).validate()
