"""Score detected incidents against ground-truth labels, per fault kind.

Matching rule: an incident matches a label of the same `kind` and `job`
whose window `[start, end + grace_s]` contains the incident's `detected_at`.
The grace (default 120 s) covers detectors that confirm a fault just after
the job was already recovering, without letting an unrelated later
incident count as a detection. Labels are in true time while event times
are host clocks, so the window also opens `skew_s` (default 2 s, the
fleet's clock-skew bound) before the start.

* recall: labels with at least one matching incident / labels.
* precision: incidents matching some label / incidents.
* latency: first matching `detected_at` - label `start` (event time).
* localisation: the first matching incident names exactly the label's nodes
  (when the label names nodes) and exactly its ranks (when it names ranks).
* false evictions: incidents of an evicting kind naming a node that was not
  faulty (any node, for an incident that matches nothing).
* transient labels (`transient: true`: a fail-slow that recovered before the
  persistence bound, issue 22) are no faults to find: they count in no
  recall, and an incident on one (same kind and job, inside its window) is
  a false incident and an *over-eviction* of the nodes it names.
* F1 = 2PR/(P+R); false incidents per day and per 1,000 GPUs divide the
  unmatched incidents by the fleet time the caller passes (`gpu_days`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainguard.schemas.kinds import ANOMALY_KINDS, EVICTING_KINDS

DEFAULT_GRACE_S = 120.0
DEFAULT_SKEW_S = 2.0


@dataclass
class KindTally:
    """Raw counts for one kind; summable across scenarios."""

    labels: int = 0
    detected: int = 0
    incidents: int = 0
    matched_incidents: int = 0
    latencies_s: list[float] = field(default_factory=list)
    within_budget: int = 0
    with_budget: int = 0
    node_checked: int = 0
    node_right: int = 0
    rank_checked: int = 0
    rank_right: int = 0
    localised: int = 0
    loc_checked: int = 0
    false_evictions: int = 0
    over_evicted: int = 0  # incidents on a transient fail-slow (nodes evicted for a blip)
    transient_labels: int = 0

    def add(self, other: KindTally) -> None:
        for name, value in vars(other).items():
            setattr(self, name, getattr(self, name) + value)

    def summary(self) -> dict[str, Any]:
        """Ratios and latency percentiles; None where there is nothing to measure."""
        lat = np.asarray(self.latencies_s, dtype=float)
        precision, recall = _ratio(self.matched_incidents, self.incidents), _ratio(self.detected, self.labels)
        return {
            "labels": self.labels, "detected": self.detected, "incidents": self.incidents,
            "precision": _ratio(self.matched_incidents, self.incidents),
            "recall": _ratio(self.detected, self.labels),
            "latency_median_s": float(np.median(lat)) if lat.size else None,
            "latency_p95_s": float(np.percentile(lat, 95)) if lat.size else None,
            "latency_max_s": float(lat.max()) if lat.size else None,
            "within_latency_target": _ratio(self.within_budget, self.with_budget),
            "node_accuracy": _ratio(self.node_right, self.node_checked),
            "rank_accuracy": _ratio(self.rank_right, self.rank_checked),
            "localisation_accuracy": _ratio(self.localised, self.loc_checked),
            "false_evictions": self.false_evictions,
            "f1": round(2 * precision * recall / (precision + recall), 4) if precision and recall else None,
            "false_incidents": self.incidents - self.matched_incidents,
            "over_evicted": self.over_evicted, "transient_labels": self.transient_labels,
        }


def _ratio(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


@dataclass
class Score:
    """A scored backtest: per-kind tallies plus which incident matched what."""

    tallies: dict[str, KindTally]
    matches: dict[str, str | None]  # incident id -> label id (None: false positive)
    missed: list[str]  # label ids never detected
    variants: dict[str, list[int]] = field(default_factory=dict)  # "kind/variant" -> [faults, detected]
    shapes: dict[str, KindTally] = field(default_factory=dict)  # "kind/variant" -> its own tally

    def per_shape(self) -> dict[str, dict[str, Any]]:
        """Recall, latency and localisation per fault shape (precision is per kind: a false alarm has no shape)."""
        return {k: t.summary() for k, t in sorted(self.shapes.items())}

    def per_kind(self) -> dict[str, dict[str, Any]]:
        return {k: t.summary() for k, t in self.tallies.items()}


def score(labels: list[dict[str, Any]], incidents: list[dict[str, Any]], *,
          grace_s: float = DEFAULT_GRACE_S, skew_s: float = DEFAULT_SKEW_S) -> Score:
    """Match incidents to labels and tally every figure per kind.

    >>> lab = [{"id": "f1", "kind": "nan", "job": "j", "start": 10.0, "end": 50.0, "nodes": ["n1"], "ranks": [3]}]
    >>> inc = [{"id": "i1", "kind": "nan", "job": "j", "detected_at": 12.0, "nodes": ["n1"], "ranks": [3]},
    ...        {"id": "i2", "kind": "nan", "job": "j", "detected_at": 900.0, "nodes": ["n2"], "ranks": [0]}]
    >>> s = score(lab, inc).per_kind()["nan"]
    >>> s["recall"], s["precision"], s["latency_median_s"], s["localisation_accuracy"]
    (1.0, 0.5, 2.0, 1.0)
    """
    tallies = {k: KindTally() for k in ANOMALY_KINDS}
    by_key: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    blips: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for lab in labels:
        if lab.get("transient"):
            blips[(lab["kind"], lab["job"])].append(lab)
            tallies.setdefault(lab["kind"], KindTally()).transient_labels += 1
            continue
        by_key[(lab["kind"], lab["job"])].append(lab)
        tallies.setdefault(lab["kind"], KindTally()).labels += 1
    labels = [lab for lab in labels if not lab.get("transient")]
    first: dict[str, dict[str, Any]] = {}
    matches: dict[str, str | None] = {}
    for inc in sorted(incidents, key=lambda i: i["detected_at"]):
        tally = tallies.setdefault(inc["kind"], KindTally())
        tally.incidents += 1
        label = next((lab for lab in by_key.get((inc["kind"], inc["job"]), ())
                      if lab["start"] - skew_s <= inc["detected_at"] <= lab["end"] + grace_s), None)
        matches[inc["id"]] = label["id"] if label else None
        if label is not None:
            tally.matched_incidents += 1
            first.setdefault(label["id"], inc)
        if inc["kind"] in EVICTING_KINDS and set(inc.get("nodes", ())) - set(label["nodes"] if label else ()):
            tally.false_evictions += 1
        if label is None and any(lab["start"] - skew_s <= inc["detected_at"] <= lab["end"] + grace_s
                                 for lab in blips.get((inc["kind"], inc["job"]), ())):
            tally.over_evicted += 1
    shapes: dict[str, KindTally] = {}
    for lab in labels:
        shape = shapes.setdefault(f"{lab['kind']}/{lab.get('variant', '-')}", KindTally())
        shape.labels += 1
        detection = first.get(lab["id"])
        if detection is not None:
            _tally_detection(tallies[lab["kind"]], lab, detection)
            _tally_detection(shape, lab, detection)
            shape.incidents += 1
            shape.matched_incidents += 1
    missed = [lab["id"] for lab in labels if lab["id"] not in first]
    variants: dict[str, list[int]] = {}
    for lab in labels:
        counts = variants.setdefault(f"{lab['kind']}/{lab.get('variant', '-')}", [0, 0])
        counts[0] += 1
        counts[1] += lab["id"] in first
    return Score(tallies, matches, missed, variants, shapes)


def _tally_detection(tally: KindTally, lab: dict[str, Any], inc: dict[str, Any]) -> None:
    tally.detected += 1
    latency = inc["detected_at"] - lab["start"]
    tally.latencies_s.append(latency)
    budget = lab.get("latency_budget_s")
    if budget is not None:
        tally.with_budget += 1
        tally.within_budget += latency <= budget
    ok = True
    if lab.get("nodes"):
        tally.node_checked += 1
        right = set(inc.get("nodes", ())) == set(lab["nodes"])
        tally.node_right += right
        ok = ok and right
    if lab.get("ranks"):
        tally.rank_checked += 1
        right = set(inc.get("ranks", ())) == set(lab["ranks"])
        tally.rank_right += right
        ok = ok and right
    if lab.get("nodes") or lab.get("ranks"):
        tally.loc_checked += 1
        tally.localised += ok
