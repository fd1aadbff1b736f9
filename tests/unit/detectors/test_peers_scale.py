"""The straggler tracker's whole-node comparison stops at a large job's ninth node, with the same answers (issue 23)."""

from __future__ import annotations

import random

import numpy as np

from trainguard.detectors.common import Bounded
from trainguard.detectors.peers import StragglerTracker, _Peers


def _reference(t: StragglerTracker, p: _Peers, ranks: list[int], ratios: np.ndarray) -> list[int]:
    """The comparison as it was: every rank grouped by node first, then more than 8 nodes give up."""
    by_node: dict[str, list[float]] = {}
    for rank, ratio in zip(ranks, ratios.tolist()):
        by_node.setdefault(p.node_of.get(rank, ""), []).append(ratio)
    if len(by_node) < 2 or len(by_node) > 8:
        return []
    means = sorted(((sum(v) / len(v), n) for n, v in by_node.items()), reverse=True)
    (top, node), (second, _) = means[0], means[1]
    rest = max(r for n, v in by_node.items() if n != node for r in v)
    if top < second * (1 + t.min_rel) or min(by_node[node]) <= rest:
        return []
    return [r for r in ranks if p.node_of.get(r) == node]


def test_the_node_comparison_answers_as_before_for_every_job_size() -> None:
    rng, t = random.Random(23), StragglerTracker()
    named = 0
    for case in range(600):
        nodes, per_node = rng.randint(1, 12), rng.choice([1, 4, 8])
        p = _Peers(0, 0)
        ranks = list(range(nodes * per_node))
        rng.shuffle(ranks)  # ranks arrive in any order
        for r in ranks:
            if rng.random() > 0.05:  # a few ranks of unknown node
                p.node_of[r] = f"n{r // per_node}"
        slow = rng.randrange(nodes)
        ratios = np.array([(1.3 if r // per_node == slow and case % 2 else 1.0) + rng.uniform(0, 0.05) for r in ranks])
        found = t._slow_node(p, ranks, ratios)
        assert found == _reference(t, p, ranks, ratios)
        named += bool(found)
    assert named > 50  # the comparison did name slow nodes, not only give up


def test_a_large_job_is_not_walked_rank_by_rank() -> None:
    """25,000 ranks on 3,125 nodes: the comparison looks at the first nine nodes' ranks, not every rank."""

    class Counting(Bounded[int, str]):
        gets = 0

        def get(self, key: int, default: str | None = None) -> str | None:  # type: ignore[override]
            Counting.gets += 1
            return super().get(key, default)

    p = _Peers(0, 0)
    p.node_of = Counting(1 << 20)
    ranks = list(range(25_000))
    for r in ranks:
        p.node_of[r] = f"n{r // 8}"
    assert StragglerTracker()._slow_node(p, ranks, np.ones(len(ranks))) == []
    assert Counting.gets <= 9 * 8 + 1
