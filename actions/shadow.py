"""The shadow report: per rule, what trainguard decided, what it would have done, and what that was worth.

Read before promoting a kind from `observe`: how often each rule fired, what
its plans would have done (nodes evicted, restarts, rollbacks), how many of
those the breaker would have blocked, and the unproductive time acting on
its own could have saved. Pure: decisions and ETTR episodes in, rows out
(the CLI reads them from act's journal, the backtest from its own run).

The saving is an estimate from the ETTR account (actions/ettr.py). Each
decision's incident has an episode in its job's account (matched on its
detection time); its *response* is detection until the job trained again
(localisation + failover; until the account's last record if it has not
recovered). For a rule with decisions that acted, the typical automated
response is the median of theirs, and an observed decision saves its own
response minus that (never below 0): `basis` "measured". For a rule that
never acted, nothing says how fast acting would have been, so the whole
response of its observed decisions is given as the upper bound it is:
`basis` "upper bound". Decisions without an episode (no steps or incident
recorded for the job) count nothing.

Verdicts (operators marking an incident a true fault, a false alarm or
unsure) are actions/verdicts.py's business: `verdicts` maps a rule to those
counts (`actions.verdicts.counts_by_rule`, over its window) and is shown as
given, empty when none are known.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from trainguard.schemas.actions import REMOVES_NODE, RESTARTS_JOB
from trainguard.schemas.records import Decision

ACTED = ("planned", "executed", "failed")  # statuses of decisions taken in auto (planned: still running)
VERDICTS = ("true", "false", "unsure")


@dataclass
class RuleRow:
    """One rule's line of the report."""

    rule: str
    kind: str
    mode: str = ""  # the mode the rule is in now
    decisions: int = 0
    observed: int = 0
    acted: int = 0
    held: int = 0  # awaiting approval, or rejected/blocked
    evictions: int = 0  # node evictions (or cordons) the plans name
    nodes: list[str] = field(default_factory=list)  # the distinct nodes they name
    restarts: int = 0
    rollbacks: int = 0
    would_block: int = 0  # observed decisions the rails would have refused
    unproductive_s: float = 0.0  # response time of the observed decisions' incidents
    saved_s: float = 0.0
    basis: str = ""  # "measured", "upper bound", or "" when nothing was observed
    verdicts: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Plain values for --json."""
        return {**asdict(self), "unproductive_s": round(self.unproductive_s, 3), "saved_s": round(self.saved_s, 3)}


def responses(episodes: Mapping[str, Mapping[str, Any]]) -> dict[tuple[str, float], float]:
    """(job, detection time) -> seconds until the job trained again, from journaled ETTR snapshots by job."""
    out: dict[tuple[str, float], float] = {}
    for job, state in episodes.items():
        last = state.get("last")
        for _onset, detected, _localised, recovered, *_ in state.get("episodes", []):
            end = recovered if recovered is not None else last
            if detected is not None and end is not None:
                out[(job, float(detected))] = max(0.0, float(end) - float(detected))
    return out


def shadow_report(decisions: Iterable[Decision], *, modes: Mapping[str, str] | None = None,
                  response_s: Mapping[tuple[str, float], float] | None = None,
                  verdicts: Mapping[str, Mapping[str, int]] | None = None) -> list[RuleRow]:
    """One row per rule, busiest first. `modes`: rule -> its mode now; `response_s`: from `responses`."""
    rows: dict[str, RuleRow] = {}
    timed: dict[str, list[float]] = {}  # rule -> responses of decisions that acted
    observed_times: dict[str, list[float]] = {}
    response_s = response_s or {}
    for d in decisions:
        row = rows.setdefault(d.rule, RuleRow(rule=d.rule, kind=d.kind))
        _count(row, d)
        took = response_s.get((d.job, float(d.ts)))
        if took is None:
            continue
        if d.status == "observed":
            observed_times.setdefault(d.rule, []).append(took)
        elif d.status in ("executed", "failed"):
            timed.setdefault(d.rule, []).append(took)
    for rule, row in rows.items():
        row.mode = (modes or {}).get(rule, "")
        row.nodes.sort()
        row.verdicts = {v: int((verdicts or {}).get(rule, {}).get(v, 0)) for v in VERDICTS} \
            if verdicts and rule in verdicts else {}
        _saving(row, observed_times.get(rule, []), timed.get(rule, []))
    return sorted(rows.values(), key=lambda r: (-r.decisions, r.rule))


def _count(row: RuleRow, d: Decision) -> None:
    row.decisions += 1
    if d.status == "observed":
        row.observed += 1
        row.would_block += 1 if d.would_block else 0
    elif d.status in ACTED:
        row.acted += 1
    else:
        row.held += 1
    for step in d.plan:
        if step.action in REMOVES_NODE:
            row.evictions += max(1, len(step.nodes))  # a step naming its nodes at run time counts once
            row.nodes.extend(n for n in step.nodes if n not in row.nodes)
        elif step.action == "rollback_code":
            row.rollbacks += 1
        elif step.action in RESTARTS_JOB:
            row.restarts += 1


def _saving(row: RuleRow, observed: list[float], acted: list[float]) -> None:
    if not observed:
        return
    row.unproductive_s = sum(observed)
    if acted:
        typical = statistics.median(acted)
        row.saved_s, row.basis = sum(max(0.0, t - typical) for t in observed), "measured"
    else:
        row.saved_s, row.basis = row.unproductive_s, "upper bound"
