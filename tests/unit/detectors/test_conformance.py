"""One suite, every registered detector: built-ins and installed plug-ins alike.

Each type found under the `trainguard.detectors` entry points is built with
its `example()` and checked for the protocol's promises: it survives a
pickle round-trip mid-stream, it is deterministic, it never mutates its
input, its state stays bounded on a long stream, `tick` is safe at any
time, every anomaly uses one of the eight kinds, and the class carries a
docstring example.
"""

from __future__ import annotations

import doctest
import importlib
import pickle

import msgspec
import pytest
from detector_fleet import Fleet, mixed_stream

from detectors.base import Detector
from detectors.registry import available, load
from schemas.records import ANOMALY_KINDS, Anomaly, Record

TYPES = sorted(available())
STREAM = mixed_stream()


def run(det: Detector, records: list[Record]) -> list[bytes]:
    """Feed records (ticking like the pipeline) and return the encoded anomalies."""
    out: list[Anomaly] = []
    for record in records:
        out += det.observe(record)
        out += det.tick(record.ts)
    return [msgspec.json.encode(a) for a in out]


def test_the_builtins_and_the_plugin_are_registered() -> None:
    expected = {"nan", "hw_fault", "network", "hang", "slowdown", "loss_spike", "sdc", "user_error", "node_health"}
    assert expected | {"sample_long_step"} <= set(TYPES)


@pytest.mark.parametrize("type_name", TYPES)
def test_pickle_round_trip_mid_stream(type_name: str) -> None:
    whole = run(load(type_name).example(), STREAM)
    half = len(STREAM) // 2
    first = load(type_name).example()
    head = run(first, STREAM[:half])
    revived = pickle.loads(pickle.dumps(first))
    assert head + run(revived, STREAM[half:]) == whole


@pytest.mark.parametrize("type_name", TYPES)
def test_deterministic(type_name: str) -> None:
    assert run(load(type_name).example(), STREAM) == run(load(type_name).example(), STREAM)


@pytest.mark.parametrize("type_name", TYPES)
def test_input_is_not_mutated(type_name: str) -> None:
    before = [msgspec.json.encode(r) for r in STREAM]
    run(load(type_name).example(), STREAM)
    assert [msgspec.json.encode(r) for r in STREAM] == before


@pytest.mark.parametrize("type_name", TYPES)
def test_state_is_bounded_on_a_long_stream(type_name: str) -> None:
    det = load(type_name).example()
    fleet = Fleet(seed=3)
    run(det, fleet.steps(100))
    early = det.state_size()
    for _ in range(8):
        run(det, fleet.steps(100))
    assert det.state_size() <= early * 1.2 + 20, (early, det.state_size())


@pytest.mark.parametrize("type_name", TYPES)
def test_tick_is_safe_any_time(type_name: str) -> None:
    det = load(type_name).example()
    assert det.tick(0.0) == [] or all(isinstance(a, Anomaly) for a in det.tick(0.0))
    run(det, STREAM[:500])
    for ts in (-1.0, STREAM[499].ts, STREAM[499].ts + 1e6):
        assert all(isinstance(a, Anomaly) for a in det.tick(ts))


@pytest.mark.parametrize("type_name", TYPES)
def test_anomalies_use_the_eight_kinds_and_are_localised_in_time(type_name: str) -> None:
    for raw in run(load(type_name).example(), STREAM):
        anomaly = msgspec.json.decode(raw, type=Anomaly)
        assert anomaly.kind in ANOMALY_KINDS
        assert anomaly.onset <= anomaly.ts


@pytest.mark.parametrize("type_name", TYPES)
def test_has_a_passing_docstring_example(type_name: str) -> None:
    cls = load(type_name)
    assert ">>>" in (cls.__doc__ or ""), f"{cls.__name__} has no docstring example"
    result = doctest.testmod(importlib.import_module(cls.__module__))
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("type_name,kind", [
    ("nan", "nan"), ("hw_fault", "hw_fault"), ("network", "network"), ("hang", "hang"), ("slowdown", "slowdown"),
    ("loss_spike", "loss_spike"), ("sdc", "sdc"), ("user_error", "user_error"), ("node_health", "hw_fault"),
    ("sample_long_step", "slowdown"),
])
def test_each_detector_finds_its_fault_in_the_mixed_stream(type_name: str, kind: str) -> None:
    kinds = {msgspec.json.decode(raw)["kind"] for raw in run(load(type_name).example(), STREAM)}
    assert kinds == {kind}


CAPPED = [t for t in TYPES if "max_jobs" in __import__("inspect").signature(load(t).__init__).parameters]


@pytest.mark.parametrize("type_name", CAPPED)
def test_state_is_bounded_when_jobs_keep_coming(type_name: str) -> None:
    """An endless stream of new jobs: the oldest are forgotten beyond `max_jobs`."""
    det = load(type_name)(max_jobs=4)
    sizes = []
    for i in range(40):
        run(det, Fleet(job=f"job-{i:02d}", nodes=1, gpus=2, tp=1, seed=i).steps(6))
        sizes.append(det.state_size())
    assert max(sizes[10:]) <= max(sizes[:10]) * 1.5 + 10, sizes


def _shifted(record: Record, ranks: int, dt: float, steps: int) -> Record:
    """The record as if from other ranks, later: a job whose ranks keep changing (elastic, restarts)."""
    changes: dict[str, object] = {"ts": record.ts + dt}
    if isinstance(getattr(record, "step", None), int):
        changes["step"] = record.step + steps  # type: ignore[attr-defined]
    if isinstance(getattr(record, "rank", None), int):
        changes["rank"] = record.rank + ranks  # type: ignore[attr-defined]
    if isinstance(getattr(record, "rank_nodes", None), dict):
        changes["rank_nodes"] = {r + ranks: n for r, n in record.rank_nodes.items()}  # type: ignore[attr-defined]
    return msgspec.structs.replace(record, **changes)


@pytest.mark.parametrize("type_name", TYPES)
def test_state_is_bounded_when_ranks_keep_coming(type_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One job, ever new ranks: per-rank maps forget beyond `MAX_RANKS`, and count what they forgot."""
    import detectors.common as common

    monkeypatch.setattr(common, "MAX_RANKS", 32)
    det = load(type_name).example()
    base = Fleet(job="wide", nodes=2, gpus=8, tp=1, seed=5).steps(6)
    sizes = []
    for i in range(30):  # 16 new ranks per round: 480 ranks seen in all
        run(det, [_shifted(r, 16 * i, 100.0 * i, 10 * i) for r in base])
        sizes.append(det.state_size())
    assert max(sizes[10:]) <= max(sizes[:10]) * 1.5 + 10, sizes


def test_rank_evictions_are_counted_for_the_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    import detectors.common as common

    monkeypatch.setattr(common, "MAX_RANKS", 8)
    det = load("hang").example()
    run(det, Fleet(job="wide", nodes=2, gpus=8, tp=1, seed=5).steps(3))  # 16 ranks into maps of 8
    assert common.bounded_evictions(det) >= 8
