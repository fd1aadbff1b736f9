"""nan, loss_spike and sdc: first step, earliest rank, protected baselines, majority vote."""

from __future__ import annotations

import msgspec
import pytest

from trainguard.detectors.checks import observe_all
from trainguard.detectors.loss_spike import LossSpikeDetector
from trainguard.detectors.nan import NanDetector
from trainguard.detectors.sdc import SdcDetector
from trainguard.detectors.synthetic import Fleet
from trainguard.schemas.records import JobTopology, TrainingStep


@pytest.mark.parametrize("bad", [{"loss": "nan"}, {"loss": "inf"}, {"grad_norm": "-inf"}, {"grad_norm": "nan"}])
def test_nan_first_step_earliest_rank_once(bad: dict[str, object]) -> None:
    f, d = Fleet(), NanDetector(skew_s=0.0)  # one clock: settles after the hook's batching alone
    observe_all(d, f.steps(5))
    out = observe_all(d, f.steps(3, bad={5: bad, 9: bad}))
    assert [(a.kind, a.step, a.ranks) for a in out] == [("nan", 6, [5])]
    assert out[0].ts - out[0].onset <= 1.0 + f.step_s * 1.5  # within about one step


def test_nan_names_the_earliest_rank_even_when_its_record_arrives_late() -> None:
    f, d = Fleet(), NanDetector()
    observe_all(d, f.steps(5))
    bad_step = f.steps(1, bad={3: {"loss": "nan"}, 8: {"loss": "nan"}})
    late_first = sorted(bad_step, key=lambda r: -getattr(r, "rank", 0))  # rank 8's record comes first
    out = observe_all(d, late_first + f.steps(3))
    assert [(a.step, a.ranks) for a in out] == [(6, [3])]


def test_nan_origin_on_a_slow_clock_arriving_after_the_batching_delay_is_still_named() -> None:
    """The origin's host runs 2 s slow and its hook batched the record; peers' NaN grad norms come first."""
    f, d = Fleet(), NanDetector()
    observe_all(d, f.steps(5))
    step = f.steps(1, bad={r: {"grad_norm": "nan"} for r in range(16) if r != 11})
    origin = next(r for r in step if getattr(r, "rank", -1) == 11)
    origin = msgspec.structs.replace(origin, loss="nan", grad_norm="nan", ts=origin.ts - 2.0)
    peers = [r for r in step if r is not origin and getattr(r, "rank", -1) != 11]
    skewed = [msgspec.structs.replace(r, ts=r.ts + 2.0) if getattr(r, "node", "") == "node-01" else r
              for r in peers]
    out = observe_all(d, skewed)
    out += d.tick(f.ts + 3.0)  # 1 s of batching plus skew: the origin is not in yet
    assert out == []
    out += observe_all(d, [origin]) + d.tick(f.ts + 7.0)
    assert [(a.step, a.ranks, a.nodes) for a in out] == [(6, [11], ["node-02"])]


def test_nan_recurring_after_restart_is_reported_again_and_is_sdc_evidence() -> None:
    f, nan, sdc = Fleet(), NanDetector(), SdcDetector()
    records = f.steps(5) + f.steps(1, bad={2: {"loss": "nan"}})
    f.attempt, f.step = 1, 3
    records += f.steps(2) + f.steps(1, bad={2: {"loss": "nan"}}) + f.steps(2)
    assert [a.step for a in observe_all(nan, records)] == [6, 6]
    found = observe_all(sdc, records)
    assert [(a.kind, a.evidence["cause"], a.ranks) for a in found] == [("sdc", "nan_recurs_after_restart", [2])]


@pytest.mark.parametrize("field,factor,fires", [
    ("loss", 5.5, True), ("loss", 30.0, True), ("loss", 3.0, False), ("grad_norm", 8.0, True),
    ("grad_norm", 2.0, False),
])
def test_loss_spike_ratio_table(field: str, factor: float, fires: bool) -> None:
    f, d = Fleet(), LossSpikeDetector()
    observe_all(d, f.steps(30))
    base = 2.0 if field == "loss" else 1.0
    out = observe_all(d, f.steps(1, bad={7: {field: base * factor}}))
    assert bool(out) == fires
    if fires:
        assert out[0].ranks == [7] and out[0].evidence["field"] == field


def test_loss_spike_baseline_is_protected_from_what_it_flags() -> None:
    f, d = Fleet(), LossSpikeDetector(ratio=5.0)
    observe_all(d, f.steps(30))
    spiking = {r: {"loss": 20.0} for r in range(f.world)}
    out = observe_all(d, f.steps(40, bad=spiking))  # a long plateau of spikes: one episode ...
    assert len(out) == 1
    assert d._jobs["job-a"].base["loss"].median() < 3.0  # ... and the baseline never learned it
    assert observe_all(d, f.steps(5)) == []


def test_sdc_majority_vote_names_the_odd_replica() -> None:
    f, d = Fleet(nodes=4, gpus=4, tp=2, pp=1), SdcDetector()
    observe_all(d, f.steps(3))
    out = observe_all(d, f.steps(2, checksum_of={10: "bitflip"}))  # rank 10 = dp 5, tp 0
    assert [(a.kind, a.ranks, a.nodes, a.group, a.step) for a in out] == [("sdc", [10], ["node-02"], "tp:0,pp:0", 4)]
    assert observe_all(d, f.steps(3, checksum_of={10: "bitflip"})) == []  # once per attempt


def test_sdc_uses_topology_and_flags_a_two_way_tie_as_ambiguous() -> None:
    d = SdcDetector()
    d.observe(JobTopology(ts=0.0, job="j", world_size=2, dp=2))
    recs = [TrainingStep(ts=1.0, job="j", rank=r, node=f"n{r}", step=1, loss=1.0, dp=r, checksum=c)
            for r, c in ((0, "a"), (1, "b"))]
    out = observe_all(d, recs)
    assert len(out) == 1 and out[0].evidence["ambiguous"] and out[0].ranks == [0, 1]


def test_sdc_missing_checksums_are_fine() -> None:
    f, d = Fleet(), SdcDetector()
    assert observe_all(d, f.steps(10, bad={r: {"checksum": None} for r in range(f.world)})) == []


def test_loss_baseline_comes_from_a_rank_that_reports_loss() -> None:
    """With pipeline parallelism only the last stage computes the loss; other ranks may send 0."""
    f, d = Fleet(), LossSpikeDetector()
    zero_first_half = {r: {"loss": 0.0} for r in range(f.world // 2)}
    observe_all(d, f.steps(30, bad=zero_first_half))
    spike = {**zero_first_half, 12: {"loss": 30.0}}
    assert [a.ranks for a in observe_all(d, f.steps(1, bad=spike))] == [[12]]


def test_sdc_without_a_majority_is_a_grouping_problem_not_corruption() -> None:
    f, d = Fleet(), SdcDetector()
    everyone_differs = {r: f"own-{r}" for r in range(f.world)}
    assert observe_all(d, f.steps(10, checksum_of=everyone_differs)) == []


def test_sdc_reports_a_second_corrupted_replica_but_not_the_same_one_twice() -> None:
    f, d = Fleet(), SdcDetector()
    observe_all(d, f.steps(3))
    first = observe_all(d, f.steps(10, checksum_of={10: "x"}))
    second = observe_all(d, f.steps(10, checksum_of={10: "x", 4: "y"}))
    assert [a.ranks for a in first] == [[10]] and [a.ranks for a in second] == [[4]]


def test_nan_is_reported_as_soon_as_every_rank_reported_its_step() -> None:
    """No need to wait out the settle window when the whole step is in: the origin cannot be late."""
    f, d = Fleet(), NanDetector()
    observe_all(d, f.steps(5))
    step = f.steps(1, bad={r: {"grad_norm": "nan"} for r in range(16) if r != 4})
    step = [msgspec.structs.replace(r, loss="nan") if getattr(r, "rank", -1) == 4 else r for r in step]
    ranks = [r for r in step if hasattr(r, "rank")]
    out = []
    for rec in ranks[:-1]:
        out += d.observe(rec)
    assert out == []  # one rank still missing: it could be the origin
    out += d.observe(ranks[-1])
    assert [(a.step, a.ranks) for a in out] == [(6, [4])]


def test_nan_origin_arriving_after_all_its_peers_finite_records_is_reported_at_once() -> None:
    """The origin's host is slow to deliver: every peer's (finite) step record is in before its NaN."""
    f, d = Fleet(), NanDetector()
    observe_all(d, f.steps(5))
    step = [r for r in f.steps(1, bad={7: {"grad_norm": "inf"}}) if hasattr(r, "rank")]
    origin = next(r for r in step if r.rank == 7)
    out = []
    for rec in [r for r in step if r is not origin]:
        out += d.observe(rec)
    assert out == []
    assert [(a.step, a.ranks) for a in d.observe(origin)] == [(6, [7])]
