"""One suite, every registered detector: built-ins and installed plug-ins alike.

The promises themselves live in `detectors.checks` (so a plug-in's CI can run
them with `check_detector`); here each check runs on each type found under the
`trainguard.detectors` entry points, plus what only built-ins promise: each
finds its own fault in the mixed stream, and the capped maps stay bounded.
"""

from __future__ import annotations

import inspect

import msgspec
import pytest

from trainguard.detectors.base import Detector
from trainguard.detectors.checks import CHECKS, Check, check_detector, run
from trainguard.detectors.dispatch import on
from trainguard.detectors.registry import available, load
from trainguard.detectors.synthetic import Fleet, mixed_stream
from trainguard.schemas.records import Record, TrainingStep

TYPES = sorted(available())
STREAM = mixed_stream()


def test_the_builtins_and_the_plugin_are_registered() -> None:
    expected = {"nan", "hw_fault", "network", "hang", "slowdown", "loss_spike", "sdc", "user_error", "node_health"}
    assert expected | {"sample_long_step"} <= set(TYPES)


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__.removeprefix("check_") for c in CHECKS])
@pytest.mark.parametrize("type_name", TYPES)
def test_conformance(type_name: str, check: Check) -> None:
    check(load(type_name), STREAM)


class _Mutates(Detector):
    """Breaks a promise on purpose: it rewrites the records it sees.

    >>> _Mutates().state_size()
    0
    """

    @on(TrainingStep)
    def _step(self, record: TrainingStep) -> None:
        msgspec.structs.force_setattr(record, "ts", record.ts + 1.0)


def test_check_detector_names_the_broken_promise() -> None:
    stream = Fleet(seed=1).steps(3)
    with pytest.raises(AssertionError, match="_Mutates mutated its input"):
        check_detector(_Mutates, stream)


class _SharesAList(Detector):
    """Breaks a promise on purpose: it declares its state a tree, and keeps one list under its job and its node.

    A snapshot (pickled without the memo) would restore two lists that then drift apart.

    >>> _SharesAList().state_size()
    0
    """

    state_is_a_tree = True

    def __init__(self) -> None:
        super().__init__(instance="shares")
        self.by_job: dict[str, list[float]] = {}
        self.by_node: dict[str, list[float]] = {}

    @on(TrainingStep)
    def _step(self, record: TrainingStep) -> None:
        losses = self.by_job.setdefault(record.job, [])
        self.by_node.setdefault(record.node, losses)
        losses.append(record.loss)

    def state_size(self) -> int:
        return len(self.by_job)


class _SharesAndSaysNot(_SharesAList):
    """The same sharing, undeclared: its snapshots keep the memo, so there is no claim to hold it to.

    >>> _SharesAndSaysNot().state_size()
    0
    """

    state_is_a_tree = False


def test_check_detector_names_a_false_claim_of_a_tree() -> None:
    """The round trips pass (this stream never reads the lists back); the tree check still names the fault."""
    stream = Fleet(seed=1).steps(3)
    with pytest.raises(AssertionError, match=r"_SharesAList declares state_is_a_tree but keeps mutable objects "
                                             r"reachable twice or frozensets \(list\)"):
        check_detector(_SharesAList, stream)
    check_detector(_SharesAndSaysNot, stream)  # undeclared: snapshotted with the memo, nothing to prove


def test_every_builtin_declares_its_state_a_tree() -> None:
    """Built-ins are snapshotted without the memo; the conformance run above holds each to it."""
    builtins = [load(t) for t in TYPES if load(t).__module__.startswith("trainguard.")]
    assert len(builtins) >= 10
    assert [cls.__name__ for cls in builtins if not cls.state_is_a_tree] == []


@pytest.mark.parametrize("type_name,kind", [
    ("nan", "nan"), ("hw_fault", "hw_fault"), ("network", "network"), ("hang", "hang"), ("slowdown", "slowdown"),
    ("loss_spike", "loss_spike"), ("sdc", "sdc"), ("user_error", "user_error"), ("node_health", "hw_fault"),
    ("metric_anomaly", "slowdown"),
    ("sample_long_step", "slowdown"),
])
def test_each_detector_finds_its_fault_in_the_mixed_stream(type_name: str, kind: str) -> None:
    kinds = {msgspec.json.decode(raw)["kind"] for raw in run(load(type_name).example(), STREAM)}
    assert kinds == {kind}


CAPPED = [t for t in TYPES if "max_jobs" in inspect.signature(load(t).__init__).parameters]


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
    import trainguard.detectors.common as common

    monkeypatch.setattr(common, "MAX_RANKS", 32)
    det = load(type_name).example()
    base = Fleet(job="wide", nodes=2, gpus=8, tp=1, seed=5).steps(6)
    sizes = []
    for i in range(30):  # 16 new ranks per round: 480 ranks seen in all
        run(det, [_shifted(r, 16 * i, 100.0 * i, 10 * i) for r in base])
        sizes.append(det.state_size())
    assert max(sizes[10:]) <= max(sizes[:10]) * 1.5 + 10, sizes


def test_rank_evictions_are_counted_for_the_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    import trainguard.detectors.common as common

    monkeypatch.setattr(common, "MAX_RANKS", 8)
    det = load("hang").example()
    run(det, Fleet(job="wide", nodes=2, gpus=8, tp=1, seed=5).steps(3))  # 16 ranks into maps of 8
    assert common.bounded_evictions(det) >= 8
