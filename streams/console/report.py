"""The console's verdict and shadow-report views: pure functions of a `ConsoleState`.

Precision is act's word, never recomputed here: act publishes it with its
rails (`rails_state` detail `precision`: per rule and per detector over
`actions.rollout.precision_window_s`, see actions/verdicts.py), so the console
shows exactly what /metrics exports. An incident's verdict is the newest
applied `operator_verdict` audit entry about it.

The shadow report is `actions.shadow.shadow_report` over the decisions the
console holds, dated within `since_s` of the newest event it has seen (the
console never reads the wall clock). The console holds no ETTR episodes of
act's account, so the report's time saved is left to the CLI
(`trainguard actions report`), which reads act's journal.
"""

from __future__ import annotations

from typing import Any

import msgspec

from trainguard.actions.rollout import RolloutPolicy, check_mode
from trainguard.actions.shadow import shadow_report
from trainguard.actions.verdicts import counts_by_rule
from trainguard.streams.console.state import ConsoleState


def verdict_of(state: ConsoleState, incident_id: str) -> dict[str, Any] | None:
    """The verdict act last applied on an incident: {verdict, note, operator, ts}; None when none."""
    for entry in reversed(state.audit.get(incident_id, ())):
        if entry.event == "operator_verdict" and entry.detail.get("applied"):
            return {"verdict": entry.detail.get("verdict", ""), "note": entry.detail.get("note", ""),
                    "operator": entry.actor, "ts": entry.ts}
    return None


def policy_of(rails: dict[str, Any]) -> RolloutPolicy:
    """The rollout policy act last published (observe everywhere until it has)."""
    shown = rails.get("rollout") or {}
    try:
        return RolloutPolicy(check_mode(str(shown.get("default", "observe"))),
                             {str(k): check_mode(str(v)) for k, v in shown.get("kinds", {}).items()},
                             {str(k): check_mode(str(v)) for k, v in shown.get("rules", {}).items()})
    except ValueError:
        return RolloutPolicy()


def rule_modes(state: ConsoleState) -> dict[str, tuple[str, str]]:
    """Each rule the console has seen decide: (its kind, the mode it is in now)."""
    policy, held = policy_of(state.rails), list(state.rails.get("approval_kinds", []))
    kinds = {d.rule: str(d.kind) for d in state.decisions.values()}
    return {rule: (kind, policy.mode_for(kind, rule, held)) for rule, kind in kinds.items()}


def precision_rows(state: ConsoleState) -> dict[str, Any]:
    """Per rule: its mode and act's precision figures; per detector: the figures. For Controls."""
    shown = state.rails.get("precision") or {}
    rules, detectors = shown.get("rules", {}), shown.get("detectors", {})
    modes, low = rule_modes(state), set(shown.get("low", []))
    for rule, mode in (shown.get("modes") or {}).items():
        modes.setdefault(rule, ("", str(mode)))
    rows = [{"rule": rule, "kind": kind, "mode": mode, "low": rule in low,
             **{k: rules.get(rule, {}).get(k, 0) for k in ("true", "false", "unsure")},
             "precision": rules.get(rule, {}).get("precision")} for rule, (kind, mode) in sorted(modes.items())]
    return {"known": bool(shown), "floor": shown.get("floor"), "min_verdicts": shown.get("min_verdicts"),
            "window_s": shown.get("window_s"), "rules": rows,
            "detectors": [{"detector": d, **row} for d, row in sorted(detectors.items())]}


def report(state: ConsoleState, *, since_s: float) -> dict[str, Any]:
    """The shadow report over the decisions dated within `since_s` of the newest event seen."""
    start = state.now - since_s
    decisions = [msgspec.structs.replace(d, status=state.status.get(did, d.status))  # type: ignore[arg-type]
                 for did, d in state.decisions.items() if d.ts >= start]
    shown = (state.rails.get("precision") or {}).get("rules", {})
    modes = {rule: mode for rule, (_kind, mode) in rule_modes(state).items()}
    rows = shadow_report(decisions, modes=modes, verdicts=counts_by_rule(shown))
    return {"since": start, "decisions": len(decisions), "rules": [r.as_dict() for r in rows],
            "precision": {r: row.get("precision") for r, row in shown.items()}}
