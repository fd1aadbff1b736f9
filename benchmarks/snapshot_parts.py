"""What a task's snapshot is made of, and how much of it one commit interval changes (for bench_detectors).

The worker writes each changed task's whole state at every commit
(streams.worker.snapshot). Writing only what changed (an *incremental*
snapshot, as Kafka Streams' changelogs do per key) pays off only if most of
the state is unchanged from one commit to the next. This module measures
exactly that, so the decision rests on a number:

* the state is cut into **parts**: each detector's attributes, the
  correlator, the node->job index, the partitions' clocks, the records
  waiting for the watermark and the hosts' clock estimates; each part's
  pickle is timed (best of 3) and sized;
* each part is cut further into **leaves**: the entries of its maps (a node,
  a port, a job), and inside a job's record the entries of its per-rank maps;
  a leaf is what a changed-keys-only snapshot would rewrite;
* after one commit interval of the same mix, the **changed share** is the
  bytes of the leaves whose pickle differs (or that are new) over all bytes.

Pure: it reads a task and pickles; the caller feeds the records.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from trainguard.detectors import state_tree
from trainguard.detectors.common import Snapshottable
from trainguard.streams.worker.tasks import Task

# A map with fewer entries than this is one leaf: too small to be worth a key of its own in a changelog.
MIN_SPLIT = 16
MAX_DEPTH = 5  # part -> tracker -> its jobs -> a job -> its per-rank map: the deepest the state nests by key

Digests = dict[tuple[Any, ...], tuple[int, int]]  # leaf path -> (hash of its pickle, its bytes)


@dataclass(frozen=True)
class Part:
    """One part of a task's snapshot: its pickle's cost and size, and how much of it an interval changed."""

    name: str
    pickle_s: float
    size: int
    leaves: int
    leaf_bytes: int  # the leaves pickled one by one (a little more than `size`: each has pickle's framing)
    changed_bytes: int = 0  # of the leaves after the interval, the bytes of those new or different

    @property
    def changed_share(self) -> float:
        return self.changed_bytes / self.leaf_bytes if self.leaf_bytes else 0.0


def parts(task: Task) -> dict[str, Any]:
    """The task's snapshot cut into named parts (what `snapshot.dump` pickles, less its framing)."""
    processor = task.processor
    pipeline = processor.pipeline
    out: dict[str, Any] = {}
    for detector in pipeline.detectors:
        state = detector.__getstate__() if isinstance(detector, Snapshottable) else vars(detector)
        for attr, value in (state.items() if isinstance(state, dict) else vars(detector).items()):
            out[f"{detector.instance}.{attr}"] = value
    out["correlator"] = pipeline.correlator
    out["node->job index"] = pipeline.nodes
    out["partition clocks"] = dict(task.clock.parts)
    out["waiting records"] = processor.buffer.entries()
    if processor.skew is not None:
        out["host clock estimates"] = processor.skew
    return out


def _entries(value: Any) -> Mapping[Any, Any] | None:
    """A map's entries; packed rows (a list of tuples, the hosts' clock estimates) keyed by their first field."""
    if isinstance(value, Mapping):
        return value
    if isinstance(value, list) and value and all(isinstance(v, tuple) and v for v in value):
        return {v[0]: v for v in value}
    return None


def _state(value: Any) -> Mapping[str, Any] | None:
    """An object's pickled fields by name (a detector's job record, the clock estimator), or None."""
    if isinstance(value, (str, bytes, int, float, tuple, list, type(None))) or isinstance(value, Mapping):
        return None
    state = value.__getstate__()
    if isinstance(value, Snapshottable) and isinstance(state, tuple):
        return dict(zip(type(value)._kept, state))  # noqa: SLF001 - the slot names, in pickle's order
    return state if isinstance(state, dict) else None


def _fields(value: Any, depth: int) -> Mapping[Any, Any] | None:
    """A container's entries to split into leaves, or None to keep it one leaf.

    A map splits when it is big, or small but holding something that splits
    (a detector's map of one job whose record holds per-rank maps); an object
    splits into its fields when one of them does.
    """
    if depth >= MAX_DEPTH:
        return None
    entries = _entries(value)
    if entries is not None:
        if len(entries) >= MIN_SPLIT or any(_fields(v, depth + 1) is not None for v in entries.values()):
            return entries
        return None
    state = _state(value)
    if state is not None and any(_fields(v, depth + 1) is not None for v in state.values()):
        return state
    return None


def leaves(value: Any, path: tuple[Any, ...] = (), depth: int = 0) -> Iterator[tuple[tuple[Any, ...], bytes]]:
    """(path, pickle) of each leaf of a part: map entries, down to `MAX_DEPTH` levels."""
    fields = _fields(value, depth)
    if fields is None:
        yield path, state_tree.dumps(value)
        return
    for key, item in fields.items():
        yield from leaves(item, (*path, key), depth + 1)


def digests(value: Any) -> Digests:
    """Each leaf's digest and size: compared across an interval, the leaves that changed."""
    return {path: (hash(blob), len(blob)) for path, blob in leaves(value)}


def measure(name: str, value: Any) -> tuple[Part, Digests]:
    """A part's pickle cost (best of 3) and size, and its leaves' digests."""
    best, size = float("inf"), 0
    for _ in range(3):
        started = time.process_time()
        size = len(state_tree.dumps(value))  # as the worker pickles it: without the memo
        best = min(best, time.process_time() - started)
    found = digests(value)
    return Part(name, best, size, len(found), sum(size for _, size in found.values())), found


def changed(before: Digests, after: Digests) -> int:
    """Bytes of the leaves in `after` that are new or differ from `before`."""
    return sum(size for path, (digest, size) in after.items() if before.get(path, (None, 0))[0] != digest)
