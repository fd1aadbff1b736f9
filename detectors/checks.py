"""The detector conformance suite, importable by plug-in authors (after river's `check_estimator`).

`check_detector(cls)` builds `cls.example()` and checks the promises the
`Detector` protocol makes to the pipeline: its `@on` handlers are declared
for record types a pipeline is fed, it survives a pickle round-trip
mid-stream, alone and inside a pipeline's snapshot (workers checkpoint and
move detectors), its state is a tree when it says so (`state_is_a_tree`: no
mutable object reachable twice, so a snapshot may skip pickle's memo,
`detectors.state_tree`), it is deterministic
(backtests replay), it never mutates its input (records are shared between
detectors), its state stays bounded on a long stream (workers run for
months), `tick` is safe at any time, every anomaly uses one of the eight
kinds with `onset <= ts`, and the class carries a passing docstring example.

trainguard's own tests run every check over every registered detector; a
plug-in's CI runs `check_detector(MyDetector)`. Pure, like the package: the
stream is `detectors.synthetic.mixed_stream`, nothing is read or written.
"""

from __future__ import annotations

import doctest
import importlib
import pickle
from collections.abc import Callable

import msgspec

from trainguard.detectors import state_tree
from trainguard.detectors.base import Detector
from trainguard.detectors.dispatch import HandlerError, handlers
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.detectors.synthetic import Fleet, mixed_stream
from trainguard.schemas.kinds import ANOMALY_KINDS
from trainguard.schemas.records import Anomaly, Record

Check = Callable[[type[Detector], list[Record]], None]


def feed(det: Detector, records: list[Record]) -> list[Anomaly]:
    """Feed records, ticking after each like the pipeline; every anomaly emitted."""
    out: list[Anomaly] = []
    for record in records:
        out += det.observe(record)
        out += det.tick(record.ts)
    return out


def observe_all(det: Detector, records: list[Record]) -> list[Anomaly]:
    """Feed records with no tick: only what `observe` itself emits."""
    return [a for record in records for a in det.observe(record)]


def run(det: Detector, records: list[Record]) -> list[bytes]:
    """`feed`, encoded: byte-exact anomalies to compare runs with."""
    return [msgspec.json.encode(a) for a in feed(det, records)]


def check_handlers_are_declared_for_fed_record_types(cls: type[Detector], stream: list[Record]) -> None:
    try:
        table = handlers(cls)
    except HandlerError as exc:
        raise AssertionError(str(exc)) from None
    for names in table.values():
        for name in names:
            assert callable(getattr(cls, name, None)), f"{cls.__name__}.{name} is declared a handler but not a method"


def check_pickle_round_trip_mid_stream(cls: type[Detector], stream: list[Record]) -> None:
    whole = run(cls.example(), stream)
    half = len(stream) // 2
    first = cls.example()
    head = run(first, stream[:half])
    revived = pickle.loads(pickle.dumps(first))
    assert head + run(revived, stream[half:]) == whole, f"{cls.__name__} differs after a pickle round-trip"


def check_pipeline_snapshot_mid_stream(cls: type[Detector], stream: list[Record]) -> None:
    """What a worker does (streams.worker.snapshot): pickle the whole pipeline mid-stream as it does (without the
    memo when the detector declares its state a tree, `detectors.state_tree`), restore it, carry on."""

    def drive(pipeline: DetectionPipeline, records: list[Record]) -> list[bytes]:
        return [msgspec.json.encode(a) for r in records for a in pipeline.process(r)[0]]

    half = len(stream) // 2
    whole = drive(DetectionPipeline([cls.example()]), stream)
    first = DetectionPipeline([cls.example()])
    head = drive(first, stream[:half])
    revived = pickle.loads(state_tree.dumps(first, tree=first.is_a_tree()))  # noqa: S301 - pickled just above
    assert head + drive(revived, stream[half:]) == whole, f"{cls.__name__} differs after a pipeline snapshot"


def check_state_is_a_tree(cls: type[Detector], stream: list[Record]) -> None:
    """A detector that declares `state_is_a_tree`: no mutable object reachable twice, mid-stream and at the end.

    Its snapshots skip pickle's memo, so a list shared by two maps would come back as two lists that drift apart
    after a restore: a fault a round-trip test over a short stream need not show. A detector that does not declare
    it is snapshotted with the memo and has nothing to prove here."""
    if not cls.state_is_a_tree:
        return
    det = cls.example()
    half = len(stream) // 2
    for part in (stream[:half], stream[half:]):
        feed(det, part)
        shared = state_tree.shared_mutables(DetectionPipeline([det]))
        assert not shared, (f"{cls.__name__} declares state_is_a_tree but keeps mutable objects reachable twice "
                            f"or frozensets ({', '.join(sorted(set(shared)))}): a snapshot would restore shared "
                            "objects as separate copies, and frozensets make fast-mode pickling fail "
                            "(detectors.state_tree)")


def check_deterministic(cls: type[Detector], stream: list[Record]) -> None:
    assert run(cls.example(), stream) == run(cls.example(), stream), f"{cls.__name__} is not deterministic"


def check_input_is_not_mutated(cls: type[Detector], stream: list[Record]) -> None:
    before = [msgspec.json.encode(r) for r in stream]
    run(cls.example(), stream)
    assert [msgspec.json.encode(r) for r in stream] == before, f"{cls.__name__} mutated its input"


def check_state_is_bounded_on_a_long_stream(cls: type[Detector], stream: list[Record]) -> None:
    det = cls.example()
    fleet = Fleet(seed=3)
    run(det, fleet.steps(100))
    early = det.state_size()
    for _ in range(8):
        run(det, fleet.steps(100))
    assert det.state_size() <= early * 1.2 + 20, (cls.__name__, early, det.state_size())


def check_tick_is_safe_any_time(cls: type[Detector], stream: list[Record]) -> None:
    det = cls.example()
    assert det.tick(0.0) == [] or all(isinstance(a, Anomaly) for a in det.tick(0.0))
    some = stream[:500]
    run(det, some)
    for ts in (-1.0, some[-1].ts, some[-1].ts + 1e6):
        assert all(isinstance(a, Anomaly) for a in det.tick(ts))


def check_anomalies_use_the_eight_kinds_and_are_localised_in_time(cls: type[Detector], stream: list[Record]) -> None:
    for raw in run(cls.example(), stream):
        anomaly = msgspec.json.decode(raw, type=Anomaly)
        assert anomaly.kind in ANOMALY_KINDS, f"{cls.__name__} emitted kind {anomaly.kind!r}"
        assert anomaly.onset <= anomaly.ts, f"{cls.__name__} emitted onset {anomaly.onset} after ts {anomaly.ts}"


def check_has_a_passing_docstring_example(cls: type[Detector], stream: list[Record]) -> None:
    assert ">>>" in (cls.__doc__ or ""), f"{cls.__name__} has no docstring example"
    result = doctest.testmod(importlib.import_module(cls.__module__))
    assert result.attempted > 0 and result.failed == 0, f"{cls.__module__}: {result}"


CHECKS: tuple[Check, ...] = (
    check_handlers_are_declared_for_fed_record_types,
    check_pickle_round_trip_mid_stream,
    check_pipeline_snapshot_mid_stream,
    check_state_is_a_tree,
    check_deterministic,
    check_input_is_not_mutated,
    check_state_is_bounded_on_a_long_stream,
    check_tick_is_safe_any_time,
    check_anomalies_use_the_eight_kinds_and_are_localised_in_time,
    check_has_a_passing_docstring_example,
)


def check_detector(cls: type[Detector], stream: list[Record] | None = None) -> None:
    """Run every check on `cls`; raise AssertionError naming the first promise broken.

    >>> from trainguard.detectors.nan import NanDetector
    >>> check_detector(NanDetector)
    """
    records = mixed_stream() if stream is None else stream
    for check in CHECKS:
        check(cls, records)
