"""Detector state is a tree, so a snapshot can pickle it without pickle's memo.

Pickle remembers every object it writes (its *memo*) so that an object
reached twice is written once and comes back shared. The worker pickles
each task's whole state at every commit (streams.worker.snapshot), and at
100,000 GPUs that is well over a million objects: the memo's table alone
took about a third of the snapshot's CPU and tripled its peak memory
(issue 23). Pickle's *fast mode* writes no memo.

What fast mode gives up is sharing: a mutable object reached twice (one list
held by two maps) is written twice and restored as two lists, which then drift
apart. So fast mode is for state that is a **tree**: no mutable object
reachable twice. Immutable values (strings, numbers, tuples of those) may be
shared freely; writing them twice only costs bytes. Frozensets are the
exception: CPython's fast mode mishandles them (its `save_frozenset` never
leaves the nesting it enters, python/cpython#146059, fixed upstream in 2026,
not in the Pythons trainguard supports), so past about 50 of them in one
snapshot the pickler raises instead of writing. State that is a tree holds
sets where it would hold frozensets.

A detector declares its state a tree (`Detector.state_is_a_tree`; every built-
in does), and the worker skips the memo only when every detector of the
pipeline has (`DetectionPipeline.is_a_tree`): a plug-in that never said so
keeps the memo and its sharing. `shared_mutables` finds what breaks the rule;
the detector conformance suite (`detectors.checks`) holds every declaring
detector to it, and trainguard's own tests hold the pipeline's and the
worker's own state to it. A cycle cannot be written without the memo at all:
fast mode refuses it (ValueError). Whatever fast mode raises (a cycle,
frozensets, a snapshot from before sets replaced them), `dumps` then writes
the ordinary memo pickle, which keeps every sharing as it was and raises only
what the memo pickle itself would.

Pure: it pickles into memory and reads nothing.
"""

from __future__ import annotations

import enum
import io
import pickle
import types
from typing import Any

import msgspec
import numpy as np

# Values that are never changed in place (classes and functions pickle by name, enum members as themselves,
# numpy's dtypes describe an array's element type: a fitted model's arrays share them).
_IMMUTABLE = (str, bytes, int, float, complex, bool, type(None), frozenset, range, type, enum.Enum,
              types.FunctionType, types.BuiltinFunctionType, np.dtype)


def dumps(obj: Any, *, tree: bool = True) -> bytes:
    """`obj` pickled without the memo (fast mode) when it is a `tree`; with it when not, or when fast mode fails.

    The bytes are an ordinary pickle (`pickle.loads` reads them, and every
    snapshot written before). Without the memo, sharing of mutable objects is
    not kept: pass `tree=False` for state not known to be a tree (`shared_mutables`).
    """
    return pickled(obj, tree=tree)[0]


def pickled(obj: Any, *, tree: bool = True) -> tuple[bytes, bool]:
    """`dumps`, and whether fast mode wrote it (the worker counts the snapshots that needed the memo).

    >>> pickled({"a": [1]})[1], pickled({"a": [1]}, tree=False)[1]
    (True, False)
    """
    if not tree:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), False
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        pickler.fast = True
        pickler.dump(obj)
    except Exception:  # noqa: BLE001 - a cycle (ValueError), frozensets (KeyError, SystemError): the memo pickle
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), False
    return out.getvalue(), True


def shared_mutables(obj: Any) -> list[str]:
    """The type names of the mutable objects that `obj`'s pickle reaches more than once, and of its
    frozensets (fast mode cannot write many of them); empty: a tree fast mode writes.

    It walks exactly what pickle writes (`__getstate__`, `__reduce__`, transient
    fields left out), with Python's own pickler, so it is for tests and checks,
    not for the hot path.

    >>> shared = [1, 2]
    >>> shared_mutables({"a": shared, "b": shared}), shared_mutables({"a": [1, 2], "b": [1, 2]})
    (['list'], [])
    >>> shared_mutables({"a": "node-1", "b": "node-1", "c": (1, "x")})  # immutable: free to share
    []
    >>> shared_mutables({"phases": frozenset({"eval"})})  # use a set: CPython's fast mode mishandles these
    ['frozenset']
    """
    finder = _SharingFinder()
    finder.dump(obj)
    return finder.shared


class _SharingFinder(pickle._Pickler):  # noqa: SLF001 - the pure-Python pickler is the one whose `save` can be hooked
    """Pickles into nothing and notes every mutable object it meets a second time."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL)
        self.shared: list[str] = []

    def save(self, obj: Any, save_persistent_id: bool = True) -> None:
        # typeshed leaves out the pure-Python pickler's memo and save: both are in CPython's pickle.py since 2.x
        if type(obj) is frozenset or id(obj) in self.memo and _holds_mutable(obj):  # type: ignore[attr-defined]
            self.shared.append(type(obj).__qualname__)
        super().save(obj, save_persistent_id)  # type: ignore[misc]


def _holds_mutable(obj: Any, depth: int = 0) -> bool:
    """True when `obj` is mutable or (a tuple or frozen struct) contains something mutable."""
    if isinstance(obj, _IMMUTABLE):
        return False
    if depth > 20:
        return True  # too deep to tell: call it mutable (a check may then say too much, never too little)
    if isinstance(obj, tuple):
        return any(_holds_mutable(item, depth + 1) for item in obj)
    if isinstance(obj, msgspec.Struct) and obj.__struct_config__.frozen:
        return any(_holds_mutable(getattr(obj, name), depth + 1) for name in obj.__struct_fields__)
    return True
