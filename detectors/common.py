"""Small building blocks the built-in detectors share.

* `Rolling` is a fixed-size window with a cached median: the robust,
  allocation-light baseline most detectors need (median/MAD instead of
  mean/stddev, so one wild value does not move it).
* `Bounded` is a dict that forgets its oldest keys beyond a cap, so a
  detector's state stays bounded on an endless stream of new jobs or nodes.
* `finding()` builds an `Anomaly` with a deterministic id.

Everything here is pure and picklable.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any, Generic, TypeVar

from detectors.base import anomaly_id
from schemas.records import Anomaly

K = TypeVar("K")
V = TypeVar("V")


class Rolling:
    """The last `size` values with a lazily recomputed median and MAD.

    >>> r = Rolling(5)
    >>> for v in (1.0, 2.0, 3.0, 100.0, 2.0):
    ...     r.add(v)
    >>> r.median(), r.mad()
    (2.0, 1.0)
    """

    __slots__ = ("size", "values", "_median", "_mad")

    def __init__(self, size: int) -> None:
        self.size = size
        self.values: deque[float] = deque(maxlen=size)
        self._median: float | None = None
        self._mad: float | None = None

    def __getstate__(self) -> tuple[int, list[float]]:
        return self.size, list(self.values)

    def __setstate__(self, state: tuple[int, list[float]]) -> None:
        self.size = state[0]
        self.values = deque(state[1], maxlen=state[0])
        self._median = self._mad = None

    def add(self, value: float) -> None:
        """Append one value (the oldest falls out when full)."""
        self.values.append(value)
        self._median = self._mad = None

    def __len__(self) -> int:
        return len(self.values)

    def median(self) -> float:
        """The median of the window (0.0 when empty)."""
        if self._median is None:
            self._median = median(self.values)
        return self._median

    def mad(self) -> float:
        """The median absolute deviation from the median."""
        if self._mad is None:
            m = self.median()
            self._mad = median([abs(v - m) for v in self.values])
        return self._mad


def finite(value: object) -> bool:
    """Whether a `Metric` (float, int, "nan", "inf" ...) is a finite number; None is not.

    The fast path (a float) costs one subtraction: x - x is 0 only for finite x.

    >>> finite(1.5), finite("nan"), finite(float("inf")), finite(None), finite(3)
    (True, False, False, False, True)
    """
    if value.__class__ is float:
        return value - value == 0.0  # type: ignore[operator]
    if value.__class__ is int:
        return True
    return False


def median(values: Any) -> float:
    """The median of an iterable of floats (0.0 when empty).

    >>> median([3.0, 1.0, 2.0]), median([1.0, 2.0, 3.0, 4.0])
    (2.0, 2.5)
    """
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return 0.0
    mid = n // 2
    return float(ordered[mid]) if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


class Bounded(OrderedDict[K, V], Generic[K, V]):
    """A dict keeping at most `cap` keys; inserting a new key past it drops the oldest.

    Every drop is counted in `evicted`, so a bound that bites shows up in the
    metrics (`bounded_evictions`) instead of silently degrading a detector.

    >>> b = Bounded(2)
    >>> b["a"], b["b"], b["c"] = 1, 2, 3
    >>> list(b), b.evicted
    (['b', 'c'], 1)
    """

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap
        self.evicted = 0

    def __reduce__(self) -> Any:
        return (type(self), (self.cap,), {"evicted": self.evicted}, None, iter(self.items()))

    def __setitem__(self, key: K, value: V) -> None:
        new = key not in self
        super().__setitem__(key, value)
        if new and len(self) > self.cap:
            self.popitem(last=False)
            self.evicted += 1


# Per-rank maps of one job hold at most this many ranks (read at call time: tests lower it).
# 32k ranks is beyond today's largest jobs; past it, the least recently added ranks are forgotten, counted.
MAX_RANKS = 32_768


def rank_map() -> Bounded[Any, Any]:
    """A per-rank (or per-group) map of one job, bounded at `MAX_RANKS`."""
    return Bounded(MAX_RANKS)


def bounded_evictions(obj: object, _depth: int = 3) -> int:
    """Evictions of every `Bounded` map reachable from `obj`'s attributes (a few levels deep).

    One function for the metrics (called per scrape, O(keys)) instead of a counter
    threaded through each detector.

    >>> class D:
    ...     def __init__(self) -> None:
    ...         self.jobs = Bounded(1)
    >>> d = D(); d.jobs["a"] = 1; d.jobs["b"] = 2
    >>> bounded_evictions(d)
    1
    """
    if _depth < 0:
        return 0
    total = obj.evicted if isinstance(obj, Bounded) else 0
    for child in _children(obj):
        if isinstance(child, dict) or hasattr(child, "__dict__") or hasattr(child, "__slots__"):
            total += bounded_evictions(child, _depth - 1)
    return total


def _children(obj: object) -> list[Any]:
    """Attribute values of an object (plain or slotted), or a dict's values."""
    if isinstance(obj, dict):
        return list(obj.values())
    if isinstance(obj, (str, bytes, int, float, tuple, list, set, frozenset)):
        return []
    out = list(getattr(obj, "__dict__", {}).values())
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if hasattr(obj, name):
                out.append(getattr(obj, name))
    return out


def finding(
    detector: str,
    kind: str,
    *,
    ts: float,
    onset: float,
    job: str = "",
    nodes: list[str] | None = None,
    ranks: list[int] | None = None,
    gpus: list[str] | None = None,
    group: str = "",
    step: int | None = None,
    score: float = 1.0,
    evidence: dict[str, Any] | None = None,
    key: object = "",
) -> Anomaly:
    """An `Anomaly` whose id is derived from what was found (replays agree)."""
    return Anomaly(
        ts=ts,
        id=anomaly_id(detector, kind, job, key, onset),
        kind=kind,  # type: ignore[arg-type]
        detector=detector,
        onset=onset,
        job=job,
        nodes=sorted(nodes or []),
        ranks=sorted(ranks or []),
        gpus=sorted(gpus or []),
        group=group,
        step=step,
        score=score,
        evidence=evidence or {},
    )
