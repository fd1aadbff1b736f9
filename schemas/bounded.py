"""A dict that forgets its oldest keys beyond a cap, and the count of what every such dict forgot.

Detectors keep per-job, per-node and per-GPU state and act keeps per-job
memories (topologies, retries, checkpoints); on an endless stream of new
jobs or nodes each must stay bounded. It lives in `schemas`, the package
every layer imports, so act needs nothing from the detectors for it.
Pure and picklable.
"""

from __future__ import annotations

from itertools import islice
from typing import Any, Generic, Protocol, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Packing(Protocol):
    """How a `Bounded` map's values pickle as one block instead of object by object.

    The worker pickles every task's state at each commit; tens of thousands of
    small per-port or per-GPU objects, each reduced by pickle on its own, were
    most of that cost (issue 23). A packing turns all values into plain tuples
    in one pass and back. `pack` returns None when it cannot pack these values
    (one of another type, say): the map then pickles item by item, as always.
    Instances must pickle (a module-level class holding classes, say).
    """

    def pack(self, values: list[Any]) -> Any | None: ...

    def unpack(self, packed: Any) -> list[Any]: ...


class Bounded(dict[K, V], Generic[K, V]):
    """A dict keeping at most `cap` keys; inserting a new key past it drops the oldest inserted.

    Every drop is counted in `evicted`, so a bound that bites shows up in the
    metrics (`bounded_evictions`) instead of silently degrading a detector.

    A plain dict, not an `OrderedDict`: a dict keeps its keys in insertion
    order too, and every store into an `OrderedDict` also writes its second
    table, a cache miss per event once the detectors hold 12,500 nodes
    (issue 23). A dict cannot pop its oldest key cheaply, though: each pop
    leaves a hole that the next `next(iter(d))` scans over again, so popping
    one key per insert costs O(cap) (34 us at 100,000 keys, measured). So a
    map past its cap drops its oldest 1/64 at once (one key below 128), one
    scan for many keys: a burst of new jobs costs the same per key at any cap.

    >>> b = Bounded(2)
    >>> b["a"], b["b"], b["c"] = 1, 2, 3
    >>> list(b), b.evicted
    (['b', 'c'], 1)
    """

    packing: Packing | None = None  # a class default: maps pickled before packings existed restore with none

    def __init__(self, cap: int, packing: Packing | None = None) -> None:
        super().__init__()
        self.cap = cap
        self.evicted = 0
        if packing is not None:
            self.packing = packing

    def __reduce__(self) -> Any:
        packed = self.packing.pack(list(self.values())) if self.packing is not None and self else None
        if packed is None:
            return (type(self), (self.cap,), {"evicted": self.evicted, **self._packing()}, None, iter(self.items()))
        return (_unpacked, (type(self), self.cap, self.evicted, self.packing, list(self), packed))

    def _packing(self) -> dict[str, Any]:
        return {} if self.packing is None else {"packing": self.packing}

    def __setitem__(self, key: K, value: V) -> None:
        # On every detector's hot path: dict's own method, bound once, not `super()` per call
        # (194 -> 133 ns a store); a known key keeps its place, as in any dict.
        if key in self:
            _store(self, key, value)
            return
        _store(self, key, value)
        if len(self) > self.cap:
            self._drop_oldest()

    def setdefault(self, key: K, default: V = None) -> V:  # type: ignore[assignment]
        """As dict's, through the cap (dict's own would store past it)."""
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args: Any, **kwargs: Any) -> None:
        """As dict's, through the cap (dict's own would store past it)."""
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def _drop_oldest(self) -> None:
        """Drop the oldest 1/64 of the keys (at least one), in one scan from the front."""
        oldest = list(islice(self, max(1, self.cap >> 6)))
        for key in oldest:
            del self[key]
        self.evicted += len(oldest)


_store = dict.__setitem__

# A store into a `Bounded` map under a key already in it, in C: no cap to check, nothing to evict, exactly
# what `Bounded.__setitem__` does for such a key less its Python call (about 200 ns). For the few per-record
# maps where nearly every record updates a known key (a rank's last step or heartbeat): test `key in m` first.
# The same holds for a new key while `len(m) < m.cap` (SDC's pending groups): the store cannot pass the cap.
store_known = dict.__setitem__


def _unpacked(cls: type[Bounded[Any, Any]], cap: int, evicted: int, packing: Packing, keys: list[Any],
              packed: Any) -> Bounded[Any, Any]:
    """A packed map back (what pickle calls on load): same keys in the same order, cap, count and packing."""
    out = cls(cap, packing)
    dict.update(out, zip(keys, packing.unpack(packed)))  # at most cap keys: no need to pass the cap
    out.evicted = evicted
    return out


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
