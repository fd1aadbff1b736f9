"""Handlers per record type: a detector says once what it reads, with `@on(...)`.

A detector method decorated `@on(TrainingStep)` handles training steps;
`@on(NodeGpuSample, RdmaSample)` handles both. The declarations are the one
place that says what a detector consumes: the pipeline builds from them a
table record type -> bound handlers and dispatches each record once, so a
detector never routes again with `isinstance`, and no tag set can disagree
with a branch and drop records silently.

A handler returns the anomalies its record reveals, or None for none (most
handlers only update state; time-based rules fire from `tick`).

`handlers(cls)` checks the declarations when a detector is registered or put
in a pipeline: a detector with no handler, or a handler for a record type the
pipeline is never fed, is an error naming the class and the type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, TypeVar

from trainguard.schemas.codec import RECORD_TYPES, record_tag
from trainguard.schemas.records import Anomaly, Record
from trainguard.schemas.topics import INPUT_TOPICS, TOPIC_OF_TAG

# The record types the worker and the backtest feed a pipeline: those of the input topics.
OBSERVED: frozenset[type[Record]] = frozenset(
    cls for cls in RECORD_TYPES if TOPIC_OF_TAG[record_tag(cls)] in INPUT_TOPICS)

Handler = Callable[[Any], "list[Anomaly] | None"]
H = TypeVar("H", bound=Callable[..., Any])
_MARK = "__trainguard_handles__"
# Handlers that cannot carry the mark: methods compiled by mypyc (docs/sizing.md, "A compiled detector core"),
# keyed by their qualified name, which is all such a method has. A plain function always carries the mark.
_UNMARKABLE: dict[str, tuple[type[Record], ...]] = {}


class HandlerError(TypeError):
    """A detector's handler declarations cannot work in a pipeline."""


def on(*types: type[Record]) -> Callable[[H], H]:
    """Declare the decorated method the handler of records of `types`.

    >>> from trainguard.detectors.base import Detector
    >>> from trainguard.schemas.records import TrainingStep
    >>> class Counter(Detector):
    ...     '''Counts steps.'''
    ...     seen = 0
    ...     @on(TrainingStep)
    ...     def _step(self, rec: TrainingStep) -> None:
    ...         self.seen += 1
    >>> c = Counter()
    >>> c.observe(TrainingStep(ts=1.0, job="j", rank=0, node="n", step=1, loss=1.0)), c.seen
    ([], 1)
    >>> consumes(Counter)
    frozenset({'step'})
    """
    if not types:
        raise HandlerError("@on() needs at least one record type")

    def mark(fn: H) -> H:
        try:
            setattr(fn, _MARK, (*getattr(fn, _MARK, ()), *types))
        except AttributeError:  # a compiled method: no attribute of its own
            _UNMARKABLE[fn.__qualname__] = (*_UNMARKABLE.get(fn.__qualname__, ()), *types)
        return fn

    return mark


def declared(cls: type) -> dict[type, tuple[str, ...]]:
    """Record type -> names of the methods declared for it, base classes first (unchecked).

    A subclass that redefines a handler under the same name replaces it.
    """
    names: dict[str, tuple[type, ...]] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            types = getattr(value, _MARK, None)
            if types is None and not hasattr(value, "__module__"):  # a compiled method
                types = _UNMARKABLE.get(f"{klass.__qualname__}.{name}")
            if types is not None:
                names[name] = types
    table: dict[type, tuple[str, ...]] = {}
    for name, types in names.items():
        for record_type in types:
            table[record_type] = (*table.get(record_type, ()), name)
    return table


@cache  # a pure function of the class, asked on every `Detector.observe`
def handlers(cls: type) -> Mapping[type[Record], tuple[str, ...]]:
    """The checked table record type -> handler names of a detector class.

    Raises `HandlerError` for a detector with no handler or a handler of a
    type no pipeline is fed (a plain typo would otherwise never fire).
    """
    table = declared(cls)
    if not table:
        raise HandlerError(f"{cls.__name__} declares no handler: decorate a method with @on(RecordType)")
    for record_type, names in table.items():
        if record_type not in OBSERVED:
            fed = ", ".join(sorted(t.__name__ for t in OBSERVED))
            raise HandlerError(f"{cls.__name__}.{names[0]} handles {getattr(record_type, '__name__', record_type)}, "
                               f"which no pipeline is fed (fed: {fed})")
    return table


def consumes(cls: type) -> frozenset[str]:
    """The record type tags a detector class handles (for `trainguard detectors list`)."""
    return frozenset(str(t.__struct_config__.tag) for t in handlers(cls))


def bind(detector: object) -> dict[type[Record], list[Handler]]:
    """Record type -> the detector's bound handlers, in declaration order.

    Typed `object`, not `Detector`: `detectors.base` imports this module, and
    this one needs nothing of the class but its handler declarations.
    """
    cls: type = type(detector)
    return {t: [getattr(detector, name) for name in names] for t, names in handlers(cls).items()}
