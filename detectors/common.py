"""Small building blocks the built-in detectors share.

* `Rolling` is a fixed-size window, kept sorted as it moves, with its median
  and MAD: the robust baseline most detectors need (median/MAD instead of
  mean/stddev, so one wild value does not move it).
* `Bounded` (from `schemas.bounded`, where act's memories find it too) is a
  dict that forgets its oldest keys beyond a cap, so a detector's state stays
  bounded on an endless stream of new jobs or nodes.
* `finding()` builds an `Anomaly` with a deterministic id.
* `Snapshottable` is how detector state pickles: the worker snapshots
  every task's pipeline on its hot loop (streams.worker.snapshot).
  `SlotRows` and `DictRows` pack a `Bounded` map of such objects (a port
  each, a node's GPUs) as one block of tuples: 3-4x cheaper to pickle than
  object by object.

Everything here is pure and picklable.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable
from math import inf, isfinite
from operator import attrgetter
from typing import Any, ClassVar

from trainguard.schemas.bounded import Bounded as Bounded  # re-exported: detectors and older snapshots name it here
from trainguard.schemas.bounded import bounded_evictions as bounded_evictions
from trainguard.schemas.bounded import store_known as store_known
from trainguard.schemas.ids import anomaly_id
from trainguard.schemas.records import Anomaly


class Snapshottable:
    """Pickles an object's state, less its `transient` fields, which `restore()` rebuilds.

    A slotted class (the per-job and per-GPU records detectors keep by the
    thousand) pickles as a bare tuple of its slot values, in slot order: no
    names and no dict per object, so a worker's snapshot stays small and fast.
    Any other class pickles its `__dict__`. Caches and tables derived from the
    rest are declared `transient` and rebuilt on restore, never stored.

    >>> class Box(Snapshottable):
    ...     __slots__ = ("items", "count")
    ...     transient = ("count",)
    ...     def __init__(self) -> None:
    ...         self.items, self.count = [1, 2], 2
    ...     def restore(self) -> None:
    ...         self.count = len(self.items)
    >>> state = Box().__getstate__()  # what pickle stores
    >>> state
    ([1, 2],)
    >>> back = Box.__new__(Box); back.__setstate__(state)  # what pickle does on load
    >>> back.items, back.count
    ([1, 2], 2)
    """

    __slots__ = ()
    transient: ClassVar[tuple[str, ...]] = ()
    _kept: ClassVar[tuple[str, ...]] = ()  # the slots that pickle, in order (derived per class)
    _has_dict: ClassVar[bool] = False  # instances keep a __dict__ (some class of the MRO declares no slots)
    # The kept slots' values as one tuple, read in C: a snapshot pickles thousands of these per task, and
    # a Python loop of getattr per object was most of the snapshot's cost (issue 23).
    _values: ClassVar[staticmethod[[Any], tuple[Any, ...]]] = staticmethod(lambda _obj: ())

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        slots: list[str] = []
        for klass in reversed(cls.__mro__):
            declared = vars(klass).get("__slots__", ())
            slots += [declared] if isinstance(declared, str) else list(declared)
        has_dict = "__dict__" in slots or any("__slots__" not in vars(k) for k in cls.__mro__[:-1])
        native = vars(cls).get("__mypyc_attrs__")
        if native is not None:  # compiled by mypyc: its own layout, the bases' attributes included
            slots, has_dict = list(native), "__dict__" in native
        cls._kept = tuple(s for s in slots if s not in cls.transient and s not in ("__dict__", "__weakref__"))
        cls._has_dict = has_dict
        cls._values = staticmethod(_tuple_getter(cls._kept))

    def __getstate__(self) -> Any:
        if self._has_dict:
            state = {k: v for k, v in vars(self).items() if k not in self.transient}
            state.update(zip(self._kept, self._values(self)))  # the slots a slotted parent declares
            return state
        return self._values(self)

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, dict):
            for name in self._kept:
                if name in state:
                    setattr(self, name, state.pop(name))
            vars(self).update(state)
        else:
            for name, value in zip(self._kept, state):
                setattr(self, name, value)
        self.restore()

    def restore(self) -> None:
        """Rebuild the transient fields after unpickling (default: none to rebuild)."""


def _tuple_getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A function of an object giving its `names` attributes as a tuple (attrgetter's, for any count)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda _obj: ()


class SlotRows:
    """Packs a `Bounded` map whose values are all one slotted `Snapshottable` class: one state tuple each.

    >>> rows = SlotRows(Rolling)
    >>> r = Rolling(2); r.add(1.0)
    >>> packed = rows.pack([r]); packed
    [(2, deque([1.0], maxlen=2))]
    >>> rows.unpack(packed)[0].median()
    1.0
    >>> rows.pack([r, "not a Rolling"]) is None  # anything else: the map pickles item by item
    True
    """

    def __init__(self, cls: type[Snapshottable]) -> None:
        if cls._has_dict:
            raise TypeError(f"{cls.__name__} keeps a __dict__: only slotted classes pack as rows")
        self.cls = cls

    def __reduce__(self) -> Any:
        return (SlotRows, (self.cls,))

    def pack(self, values: list[Any]) -> list[tuple[Any, ...]] | None:
        cls = self.cls
        if values and set(map(type, values)) != {cls}:
            return None
        state = cls._values if cls.__getstate__ is Snapshottable.__getstate__ else cls.__getstate__
        return list(map(state, values))  # in C when the class keeps the default state (its slots' getter)

    def unpack(self, packed: list[tuple[Any, ...]]) -> list[Snapshottable]:
        cls, out = self.cls, []
        for state in packed:
            obj = cls.__new__(cls)
            obj.__setstate__(state)
            out.append(obj)
        return out


class DictRows:
    """Packs a `Bounded` map whose values are small dicts of one slotted class (a node's GPUs by index)."""

    def __init__(self, cls: type[Snapshottable]) -> None:
        self.rows = SlotRows(cls)

    def __reduce__(self) -> Any:
        return (DictRows, (self.rows.cls,))

    def pack(self, values: list[Any]) -> list[tuple[list[Any], list[tuple[Any, ...]]]] | None:
        if values and set(map(type, values)) != {dict}:
            return None
        out, pack = [], self.rows.pack
        for value in values:
            rows = pack(list(value.values()))
            if rows is None:
                return None
            out.append((list(value), rows))
        return out

    def unpack(self, packed: list[tuple[list[Any], list[tuple[Any, ...]]]]) -> list[dict[Any, Any]]:
        return [dict(zip(keys, self.rows.unpack(rows))) for keys, rows in packed]


class Rolling(Snapshottable):
    """The last `size` values with a lazily recomputed median and MAD.

    The window is also kept sorted as it moves (one bisect out, one in), so that the median is a lookup
    and the MAD a binary search instead of two sorts per call: slowdown asks for both at every step of a
    job's leading rank, and sorting its 120-value baseline twice a step was ~2 % of a backtest (issue 23).
    The figures are bit for bit those of sorting (`median` of the same floats, in the same order). A
    window holding a NaN or an infinity has no useful order for that: it is sorted whole on each call, as
    before, until the value leaves it. Values enter through `add` only (the sorted copy follows it).

    >>> r = Rolling(5)
    >>> for v in (1.0, 2.0, 3.0, 100.0, 2.0):
    ...     r.add(v)
    >>> r.median(), r.mad()
    (2.0, 1.0)
    """

    __slots__ = ("size", "values", "_median", "_mad", "_sorted")
    transient = ("_median", "_mad", "_sorted")

    def __init__(self, size: int) -> None:
        self.size = size
        self.values: deque[float] = deque(maxlen=size)
        self._median: float | None = None
        self._mad: float | None = None
        self._sorted: list[float] | None = None  # the window in order, while every value in it is finite

    def restore(self) -> None:
        self.values = deque(self.values, maxlen=self.size)  # (snapshots before the mixin held a list)
        self._median = self._mad = self._sorted = None

    def add(self, value: float) -> None:
        """Append one value (the oldest falls out when full)."""
        ordered = self._sorted
        if ordered is not None:
            if not isfinite(value):
                self._sorted = None
            else:
                if len(self.values) == self.size:
                    del ordered[bisect_left(ordered, self.values[0])]
                insort(ordered, value)  # after equal values, as a stable sort of the window puts it
        self.values.append(value)
        self._median = self._mad = None

    def __len__(self) -> int:
        return len(self.values)

    def median(self) -> float:
        """The median of the window (0.0 when empty)."""
        if self._median is None:
            self._median = median_of_sorted(self._ordered())
        return self._median

    def mad(self) -> float:
        """The median absolute deviation from the median."""
        if self._mad is None:
            m = self.median()
            ordered = self._sorted
            if ordered is None:  # a non-finite value in the window: sort the deviations, as always
                self._mad = median([abs(v - m) for v in self.values])
            else:
                self._mad = _median_deviation(ordered, m)
        return self._mad

    def _ordered(self) -> list[float]:
        """The window sorted: kept up to date while it is finite, else sorted afresh."""
        ordered = self._sorted
        if ordered is None:
            ordered = sorted(self.values)
            if ordered and all(map(isfinite, ordered)):
                self._sorted = ordered
        return ordered


def median_of_sorted(ordered: list[float]) -> float:
    """The median of values already sorted: the middle one, or the mean of the two middle ones (0.0 when empty)."""
    n = len(ordered)
    if n == 0:
        return 0.0
    mid = n // 2
    return float(ordered[mid]) if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def _median_deviation(ordered: list[float], m: float) -> float:
    """`median([abs(v - m) for v in ordered])` of sorted, finite values, in O(log n).

    The deviations of the values below `m`, read leftwards, rise, and so do those of the rest read
    rightwards: the median is an order statistic of two sorted runs, found by binary search.
    `m - v` is exactly `abs(v - m)` for `v < m` (rounding is symmetric), so the figure is bit for bit the same.

    >>> _median_deviation([1.0, 2.0, 2.0, 3.0, 100.0], 2.0), _median_deviation([1.0, 2.0, 4.0, 8.0], 3.0)
    (1.0, 1.5)
    """
    n = len(ordered)
    if n == 0:
        return 0.0
    split = bisect_left(ordered, m)
    mid = n // 2
    if n % 2:
        return float(_kth_deviation(ordered, m, split, mid))
    return (_kth_deviation(ordered, m, split, mid - 1) + _kth_deviation(ordered, m, split, mid)) / 2.0


def _kth_deviation(ordered: list[float], m: float, split: int, k: int) -> float:
    """The `k`-th smallest (from 0) of the deviations: `m - ordered[split - 1 - i]` (rising in i) and
    `ordered[split + i] - m` (rising in i), by binary search on how many come from the left run."""
    left, right = split, len(ordered) - split
    lo, hi = max(0, k + 1 - right), min(k + 1, left)
    while lo < hi:  # the smallest count `a` of left deviations whose next one is not below the right's last taken
        a = (lo + hi) // 2
        if m - ordered[split - 1 - a] < ordered[split + k - a] - m:
            lo = a + 1
        else:
            hi = a
    a, b = lo, k + 1 - lo
    last_left = m - ordered[split - a] if a else -inf
    last_right = ordered[split + b - 1] - m if b else -inf
    return (last_left if last_left > last_right else last_right) + 0.0  # -0.0 - 0.0 is -0.0; abs gives 0.0


def median(values: Any) -> float:
    """The median of an iterable of floats (0.0 when empty).

    >>> median([3.0, 1.0, 2.0]), median([1.0, 2.0, 3.0, 4.0])
    (2.0, 2.5)
    """
    return median_of_sorted(sorted(values))


# Per-rank maps of one job hold at most this many ranks (read at call time: tests lower it).
# 32k ranks is beyond today's largest jobs; past it, the least recently added ranks are forgotten, counted.
MAX_RANKS = 32_768


def rank_map() -> Bounded[Any, Any]:
    """A per-rank (or per-group) map of one job, bounded at `MAX_RANKS`."""
    return Bounded(MAX_RANKS)


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
