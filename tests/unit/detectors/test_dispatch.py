"""Handlers per record type: declared once with @on, routed once by the pipeline, checked at registration."""

from __future__ import annotations

import pickle

import pytest

from trainguard.detectors.base import Detector
from trainguard.detectors.checks import check_detector
from trainguard.detectors.dispatch import HandlerError, consumes, handlers, on
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.detectors.synthetic import mixed_stream
from trainguard.schemas.records import Anomaly, Heartbeat, Incident, NodeGpuSample, TrainingStep


class _Counts(Detector):
    """Counts what each handler is given.

    >>> _Counts().state_size()
    0
    """

    def __init__(self, *, instance: str = "counts") -> None:
        super().__init__(instance=instance)
        self.seen: list[tuple[str, str]] = []

    @on(TrainingStep)
    def _step(self, record: TrainingStep) -> None:
        self.seen.append(("step", type(record).__name__))

    @on(Heartbeat, NodeGpuSample)
    def _alive(self, record: Heartbeat | NodeGpuSample) -> list[Anomaly]:
        self.seen.append(("alive", type(record).__name__))
        return []


def test_the_pipeline_calls_each_record_types_handler_once_and_nothing_else() -> None:
    det = _Counts()
    pipeline = DetectionPipeline([det])
    records = mixed_stream()[:400]
    for record in records:
        pipeline.process(record)
    expected = [("step" if isinstance(r, TrainingStep) else "alive", type(r).__name__) for r in records
                if isinstance(r, TrainingStep | Heartbeat | NodeGpuSample)]
    assert det.seen == expected
    assert len(expected) < len(records)  # the fleet sends types the detector does not read; they never reach it


def test_what_a_detector_consumes_is_derived_from_its_handlers() -> None:
    assert consumes(_Counts) == {"step", "heartbeat", "gpu_sample"}
    assert handlers(_Counts)[NodeGpuSample] == ("_alive",)


def test_a_detector_without_handlers_fails_when_put_in_a_pipeline() -> None:
    class Empty(Detector):
        """Reads nothing."""

    with pytest.raises(HandlerError, match="Empty declares no handler"):
        DetectionPipeline([Empty()])


def test_a_handler_for_a_type_no_pipeline_is_fed_fails_loudly() -> None:
    class Misrouted(Detector):
        """Waits for incidents, which only the action side ever sees."""

        @on(Incident)
        def _incident(self, record: Incident) -> None: ...

    with pytest.raises(HandlerError, match=r"Misrouted._incident handles Incident, which no pipeline is fed"):
        DetectionPipeline([Misrouted()])
    with pytest.raises(AssertionError, match="Misrouted._incident handles Incident"):
        check_detector(Misrouted)


@pytest.mark.parametrize("legacy", ["observe", "consumes"])
def test_the_old_protocol_is_refused_where_the_class_is_written(legacy: str) -> None:
    """A plug-in still routing by `consumes`/`observe` would be dropped silently; it fails at class definition."""
    body = {"observe": lambda self, record: [], "consumes": frozenset({"step"})}
    with pytest.raises(HandlerError, match=f"defines `{legacy}`"):
        type("Legacy", (Detector,), {legacy: body[legacy]})


def test_a_subclass_inherits_and_overrides_handlers_by_name() -> None:
    class Quieter(_Counts):
        """Steps only count twice."""

        def _step(self, record: TrainingStep) -> None:
            self.seen.append(("step2", ""))

    det = Quieter()
    det.observe(TrainingStep(ts=1.0, job="j", rank=0, node="n", step=1, loss=1.0))
    assert det.seen == [("step2", "")]


def test_a_restored_pipeline_routes_to_the_restored_detectors() -> None:
    pipeline = DetectionPipeline([_Counts()])
    revived = pickle.loads(pickle.dumps(pipeline))
    revived.process(TrainingStep(ts=1.0, job="j", rank=0, node="n", step=1, loss=1.0))
    assert revived.detectors[0].seen == [("step", "TrainingStep")]  # type: ignore[attr-defined]
    assert pipeline.detectors[0].seen == []  # type: ignore[attr-defined]
    assert "_route" not in pickle.loads(pickle.dumps(pipeline)).__getstate__()


def test_a_handler_that_cannot_carry_the_mark_is_found_by_its_qualified_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """A method compiled by mypyc takes no attribute and has no module; `dict.get` is such a method here.

    A class whose qualified name makes `dict.get` its own `get` (as a compiled `SdcDetector._step` is
    its class's) must still route heartbeats to it.
    """
    from trainguard.detectors import dispatch

    monkeypatch.setattr(dispatch, "_UNMARKABLE", {})
    assert on(Heartbeat)(dict.get) is dict.get  # the decorator hands the method back unchanged
    compiled_like = type("dict", (Detector,), {"get": dict.get, "__qualname__": "dict"})
    assert dispatch.declared(compiled_like) == {Heartbeat: ("get",)}
    assert dispatch.declared(type("other", (Detector,), {"get": dict.get})) == {}  # another class: not its handler
