"""A small step's straggler scoring in plain Python is numpy's, bit for bit (issue 23).

`_outliers_py` replaced numpy for steps of up to `SMALL_STEP` ranks, where
numpy's per-call cost was most of the slowdown detector's time in a
backtest. Random steps mix stage counts and sizes (stages under four ranks
take the whole step's level), equal values, integers, spreads from none to
wide and planted stragglers; the ratios, the slow positions and the
tracker's suspects must match the numpy path exactly.
"""

from __future__ import annotations

import random

import pytest

from trainguard.detectors import peers
from trainguard.detectors.peers import SMALL_STEP, StragglerTracker, _outliers_np, _outliers_py
from trainguard.schemas.records import TrainingStep


def _stages(rng: random.Random) -> list[tuple[list[float], list[int]]]:
    stages, rank = [], 0
    for _ in range(rng.randint(1, 6)):
        size = rng.choice([1, 2, 3, 4, 5, 8, 16, 31])
        level, spread = rng.uniform(0.1, 3.0), rng.choice([0.0, 1e-9, 0.01, 0.2])
        values: list[float] = []
        for _ in range(size):
            if rng.random() < 0.1:
                values.append(rng.randint(1, 4))  # an integer from a test or a lax writer
            else:
                values.append(level * (1 + rng.uniform(0, spread)) * (rng.choice([1.0, 1.0, 1.0, 1.6])))
        if rng.random() < 0.2 and values:
            values = [values[0]] * len(values)  # a stage of equal values (MAD 0)
        stages.append((values, list(range(rank, rank + size))))
        rank += size
    return stages


@pytest.mark.parametrize("seed", range(8))
def test_plain_python_scores_as_numpy(seed: int) -> None:
    rng = random.Random(seed)
    slow_found = 0
    for _ in range(400):
        stages = _stages(rng)
        z, min_rel = rng.choice([2.0, 4.0]), rng.choice([0.0, 0.05])
        fast = _outliers_py(stages, z, min_rel)
        assert fast is not None
        assert fast == _outliers_np(stages, z, min_rel)
        slow_found += bool(fast[1])
    assert slow_found > 20  # the cases did name slow ranks, not only agree on none


def test_an_infinite_step_time_goes_to_numpy() -> None:
    stages = [([1.0, 1.0, 1.1, float("inf")], [0, 1, 2, 3])]
    assert _outliers_py(stages, 4.0, 0.05) is None
    assert _outliers_np(stages, 4.0, 0.05)[1] == [3]


def _steps(rng: random.Random, ranks: int, steps: int) -> list[TrainingStep]:
    slow = rng.randrange(ranks)
    return [TrainingStep(ts=float(s), job="j", rank=r, node=f"n{r // 8}", step=s, loss=1.0, pp=r % 4,
                         compute_time_s=(1.3 if r == slow and s > steps // 3 else 1.0) + rng.uniform(0, 0.02))
            for s in range(steps) for r in range(ranks)]


@pytest.mark.parametrize("ranks", [8, 24, SMALL_STEP, SMALL_STEP + 8])
def test_the_tracker_names_the_same_stragglers_either_way(ranks: int, monkeypatch: pytest.MonkeyPatch) -> None:
    records = _steps(random.Random(ranks), ranks, 12)
    fast = StragglerTracker()
    for rec in records:
        fast.add(rec)
    monkeypatch.setattr(peers, "SMALL_STEP", 0)  # every step through numpy
    slow = StragglerTracker()
    for rec in records:
        slow.add(rec)
    assert fast.suspects("j") == slow.suspects("j")
    assert fast.suspects("j")[0]  # a straggler was named


def _near_tight(rng: random.Random) -> tuple[list[tuple[list[float], list[int]]], dict[int, str]]:
    """Stages whose spread straddles 5%, sometimes with one node a little slower: the skip's edge."""
    stages, node_of, rank = [], {}, 0
    slow_node = rng.choice([None, "n0", "n1"])
    for _ in range(rng.randint(1, 4)):
        size = rng.choice([1, 2, 4, 8, 16])
        level, spread = rng.uniform(0.5, 2.0), rng.choice([0.0, 0.02, 0.049, 0.05, 0.051, 0.07])
        values = []
        for r in range(rank, rank + size):
            node_of[r] = f"n{(r // 4) % 3}"
            bump = 1.0 + spread if node_of[r] == slow_node else 1.0
            values.append(level * (1 + rng.uniform(0, spread)) * bump)
        stages.append((values, list(range(rank, rank + size))))
        rank += size
    return stages, node_of


@pytest.mark.parametrize("seed", range(4))
def test_a_step_the_skip_leaves_unscored_could_flag_no_rank_and_no_node(seed: int) -> None:
    rng = random.Random(seed)
    tracker = StragglerTracker()
    tight = loose = 0
    for _ in range(600):
        stages, node_of = _near_tight(rng)
        if sum(len(v) for v, _ in stages) < 4:
            continue
        if not peers._tight(stages, tracker.min_rel):
            loose += 1
            continue
        tight += 1
        found = _outliers_py(stages, tracker.z, tracker.min_rel)
        assert found is not None and found[1] == []
        p = peers._Peers(0, 0)
        p.node_of.update(node_of)
        ranks = [r for _, stage_ranks in stages for r in stage_ranks]
        assert tracker._slow_node(p, ranks, found[0]) == []
    assert tight > 50 and loose > 50  # both sides of the bound were tried


def test_an_infinite_or_all_infinite_stage_is_never_tight() -> None:
    inf = float("inf")
    assert not peers._tight([([1.0, 1.0, 1.0, inf], [0, 1, 2, 3])], 0.05)
    assert not peers._tight([([inf, inf, inf, inf], [0, 1, 2, 3])], 0.05)


@pytest.mark.parametrize("seed", range(3))
def test_the_tracker_names_the_same_suspects_with_and_without_the_skip(seed: int,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    records = [TrainingStep(ts=float(s), job="j", rank=r, node=f"n{r // 4}", step=s, loss=1.0,
                            compute_time_s=(1.06 if r // 4 == 1 and s > 10 else 1.0) * (1 + rng.uniform(0, 0.03)))
               for s in range(40) for r in range(12)]
    skipping = StragglerTracker()
    for rec in records:
        skipping.add(rec)
    monkeypatch.setattr(peers, "_tight", lambda _stages, _min_rel: False)
    scoring = StragglerTracker()
    for rec in records:
        scoring.add(rec)
    assert skipping.suspects("j") == scoring.suspects("j")
    assert skipping.suspects("j")[1] == ["n1"]  # the 6% slow node of three was named, skip or not
