"""Detector state pickles without pickle's memo (detectors.state_tree), and what would break that is found.

`dumps` must give back exactly the state a memo pickle gives when the state
is a tree, fall back to the memo pickle on a cycle (fast mode cannot write
one), and `shared_mutables` must name every mutable object reachable twice,
including one hidden inside a shared tuple or frozen record, while letting
immutable values be shared.
"""

from __future__ import annotations

import io
import pickle
import pickletools

import msgspec

from trainguard.detectors.common import Rolling
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.detectors.settings import DetectorSettings
from trainguard.detectors.state_tree import dumps, shared_mutables
from trainguard.detectors.synthetic import mixed_stream


def _opcodes(blob: bytes) -> set[str]:
    return {op.name for op, _, _ in pickletools.genops(blob)}


class _Frozen(msgspec.Struct, frozen=True):
    items: list[int]


def test_a_tree_is_pickled_without_the_memo_and_comes_back_equal() -> None:
    rolling = Rolling(4)
    for value in (1.0, 2.0, 5.0):
        rolling.add(value)
    state = {"node-1": [rolling, (1, "a")], "node-2": {"x": [1.5, float("inf")]}}
    blob = dumps(state)
    assert "MEMOIZE" not in _opcodes(blob)  # fast mode: no memo written
    assert "MEMOIZE" in _opcodes(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))  # what it saves
    back = pickle.loads(blob)
    assert back["node-2"] == state["node-2"] and back["node-1"][1] == (1, "a")
    assert back["node-1"][0].median() == 2.0 and list(back["node-1"][0].values) == [1.0, 2.0, 5.0]


def test_a_cycle_falls_back_to_the_memo_pickle_and_keeps_it() -> None:
    loop: list[object] = []
    loop.append(loop)
    back = pickle.loads(dumps({"loop": loop}))
    assert back["loop"][0] is back["loop"]


def test_mutable_objects_reached_twice_are_named() -> None:
    shared: list[int] = [1]
    rolling = Rolling(3)
    assert shared_mutables({"a": shared, "b": shared}) == ["list"]
    assert shared_mutables([rolling, rolling]) == ["Rolling"]
    assert shared_mutables([(1, shared), (1, shared)]) == ["list"]  # inside the tuples, reached twice
    pair = ("a", shared)
    assert shared_mutables([pair, pair]) == ["tuple"]  # one tuple reached twice holds a mutable list
    record = _Frozen(items=[1])
    assert shared_mutables([record, record]) == ["_Frozen"]


def test_immutable_values_may_be_shared_but_frozensets_are_named() -> None:
    key, pair = "node-1", ("node-1", "mlx5_0", 1)
    assert shared_mutables({"a": (key, pair), "b": (key, pair), "c": _Frozen}) == []
    assert shared_mutables({"fired": frozenset({3})}) == ["frozenset"]  # fast mode fails past ~50 of them


def test_many_frozensets_fall_back_to_the_memo_pickle() -> None:
    """CPython's fast mode leaks its nesting count on every frozenset (python/cpython#146059): past 50 it raises.
    `dumps` must still write a correct pickle (the memo one), never fail where the memo pickle would not."""
    state = {"jobs": [{"fired": frozenset({i}), "ranks": [i]} for i in range(200)]}
    fast = pickle.Pickler(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL)
    fast.fast = True
    try:
        fast.dump(state)  # KeyError on Python 3.11 (SystemError on some builds); a fixed Python writes it
        fast_mode_works = True
    except Exception:  # noqa: BLE001
        fast_mode_works = False
    blob = dumps(state)
    assert pickle.loads(blob) == state
    assert ("MEMOIZE" in _opcodes(blob)) is not fast_mode_works  # the memo pickle exactly when fast mode failed


def test_the_default_pipeline_is_a_tree_mid_stream_and_after_every_fault_kind() -> None:
    """What the worker snapshots: every built-in detector, the correlator and the node->job index together."""
    stream = mixed_stream()
    pipeline = DetectionPipeline.from_settings(DetectorSettings())
    half = len(stream) // 2
    pipeline.process_all(stream[:half])
    assert shared_mutables(pipeline) == []
    found = pipeline.process_all(stream[half:])
    assert sum(len(incidents) for _, incidents in found) >= 3  # the correlator holds open incidents too
    assert shared_mutables(pipeline) == []
