"""The console's views as JSON: fleet, jobs, incidents, one incident, controls.

Pure functions of a `ConsoleState`. Node states come from act's own word
where it has one (the `rails_state` audit entry: evicted nodes, standby
spares and swaps) and from incidents otherwise:

* standby: a ready spare in act's pool;
* cordoned/evicted: act evicted or cordoned it and it has no self-check since;
* in repair: evicted, and a self-check has run on it (passing or not);
* suspect: named by an incident within `suspect_s` of the newest event;
* healthy: seen reporting, none of the above.
"""

from __future__ import annotations

from typing import Any

import msgspec

from trainguard.actions.rollout import ROLLOUT_KINDS
from trainguard.schemas.node_jobs import job_of
from trainguard.schemas.plan import CulpritsOf, PlannedAction, ReplayCulprit
from trainguard.streams.console.state import ConsoleState, audit_row, to_json

NODE_STATES = ("healthy", "suspect", "evicted", "in_repair", "standby")


def fleet(state: ConsoleState, *, suspect_s: float = 900.0) -> dict[str, Any]:
    """Every known node with its state and job, and counts by state."""
    rails = state.rails
    pool = rails.get("pool") or {"spares": state.standby_nodes, "swaps": {}}
    spares = set(pool.get("spares", []))
    swaps: dict[str, str] = dict(pool.get("swaps", {}))
    evicted = {n for nodes in rails.get("evicted", {}).values() for n in nodes}
    recent: dict[str, int] = {}
    for inc in state.incidents.values():
        if state.now - inc.detected_at <= suspect_s:
            for node in inc.nodes:
                recent[node] = recent.get(node, 0) + 1
    names = set(state.node_seen) | spares | evicted | set(swaps)
    nodes = []
    for name in sorted(names):
        if name in spares:
            kind = "standby"
        elif name in evicted:
            kind = "in_repair" if name in state.selfchecks else "evicted"
        elif name in recent:
            kind = "suspect"
        else:
            kind = "healthy"
        job = "" if kind == "standby" else job_of(state.node_job, name)  # a spare's agent idles under a job name
        if name in swaps:
            job = state.node_job.get(swaps[name], job)
        nodes.append({"node": name, "state": kind, "job": job, "last_seen": state.node_seen.get(name),
                      "recent_incidents": recent.get(name, 0), "replaces": swaps.get(name, "")})
    counts = {k: sum(1 for n in nodes if n["state"] == k) for k in NODE_STATES}
    return {"counts": counts, "nodes": nodes}


def jobs(state: ConsoleState) -> list[dict[str, Any]]:
    """One summary row per job."""
    rows = []
    for name, series in sorted(state.jobs.items()):
        last = series.steps[-1] if series.steps else None
        report = state.ettr_report(name)
        rows.append({"job": name, "nodes": len(series.nodes), "step": last[1] if last else None,
                     "loss": last[2] if last else None, "ettr": round(report.ettr, 4),
                     "incidents": len(series.incidents)})
    return rows


def job(state: ConsoleState, name: str) -> dict[str, Any] | None:
    """One job's curves (columnar, for uPlot), ETTR with its timeline, incidents and checkpoints."""
    series = state.jobs.get(name)
    if series is None:
        return None
    points = sorted(series.steps)  # by event time: a restore sends the step back, time goes on
    cols = list(zip(*points)) if points else [(), (), (), (), ()]
    incidents = [state.incidents[i] for i in series.incidents[-500:] if i in state.incidents]
    return {
        "job": name,
        "nodes": sorted(series.nodes),
        "series": {"ts": list(cols[0]), "step": list(cols[1]), "loss": [_finite(v) for v in cols[2]],
                   "step_time_s": list(cols[3]), "mfu": list(cols[4])},
        "ettr": state.ettr_report(name).as_dict(),
        "timeline": [{"cause": c, "start": a, "end": b} for c, a, b in state.ettr.timeline(name)],
        "incidents": [{"id": i.id, "kind": i.kind, "onset": i.onset, "detected_at": i.detected_at} for i in incidents],
        "checkpoints": [{"step": c.step, "path": c.path, "status": c.status, "ts": c.ts}
                        for c in series.checkpoints[-200:]],
    }


def incidents(state: ConsoleState, *, limit: int = 100, offset: int = 0, kind: str = "",
              job_name: str = "") -> dict[str, Any]:
    """A page of incidents, newest first, optionally of one kind or job."""
    chosen = [i for i in state.incidents.values()
              if (not kind or i.kind == kind) and (not job_name or i.job == job_name)]
    chosen.sort(key=lambda i: i.detected_at, reverse=True)
    page = chosen[offset:offset + limit]
    return {"total": len(chosen), "offset": offset, "items": [state.incident_row(i) for i in page]}


def incident(state: ConsoleState, incident_id: str) -> dict[str, Any] | None:
    """Everything about one incident: evidence, anomalies, scope, decision, plan steps, audit."""
    inc = state.incidents.get(incident_id)
    if inc is None:
        return None
    dec = state.decision_for(incident_id)
    subjects = [incident_id]
    steps: list[dict[str, Any]] = []
    if dec is not None:
        subjects.append(dec.id)
        commands = {c.id: c for c in state.commands.get(dec.id, [])}
        for idx, planned in enumerate(dec.plan):
            cid = f"{dec.id}-{idx}"  # the runner's command id for step idx
            subjects.append(cid)
            steps.append({"index": idx, "action": planned.action, "nodes": planned.nodes,
                          "params": msgspec.to_builtins(planned.params),
                          "depends": depends(planned),
                          "command": to_json(commands[cid]) if cid in commands else None,
                          "result": _step_result(state, cid)})
    audit = sorted((e for s in subjects for e in state.audit.get(s, ())), key=lambda e: e.ts)
    return {
        "incident": to_json(inc),
        "anomalies": [to_json(state.anomalies[a]) for a in inc.anomaly_ids if a in state.anomalies],
        "missing_anomalies": [a for a in inc.anomaly_ids if a not in state.anomalies],
        "scope": {"job": inc.job, "nodes": inc.nodes, "ranks": inc.ranks, "gpus": inc.gpus, "group": inc.group},
        "decision": None if dec is None else {**to_json(dec), "status": state.status.get(dec.id, dec.status)},
        "steps": steps,
        "audit": [audit_row(e) for e in audit],
    }


def depends(step: PlannedAction) -> str:
    """A step's references to earlier steps, in words ("" when it has none).

    >>> from trainguard.schemas.plan import StepCondition
    >>> depends(PlannedAction(action="evict_node", when=StepCondition(step=0), targets_from=CulpritsOf(step=1)))
    'only if step 0 failed; on the machines step 1 names'
    """
    out = [f"only if step {step.when.step} {step.when.status}"] if step.when is not None else []
    ref = step.targets_from
    if isinstance(ref, CulpritsOf):
        out.append(f"on the machines step {ref.step} names")
    elif isinstance(ref, ReplayCulprit):
        fallback = f", else {', '.join(ref.fallback_nodes)}" if ref.fallback_nodes else ""
        out.append(f"on the machine replay steps {ref.phases[0]} and {ref.phases[1]} name{fallback}")
    return "; ".join(out)


def controls(state: ConsoleState) -> dict[str, Any]:
    """Pending approvals, the breaker, the standby pool and the nodes that could return to it."""
    rails = state.rails
    pending = [{"decision": {**to_json(d), "status": "awaiting_approval"},
                "incident": state.incident_row(state.incidents[d.incident_id]) if d.incident_id in state.incidents
                else None}
               for did, d in state.decisions.items() if state.status.get(did) == "awaiting_approval"]
    pool = rails.get("pool") or {"spares": state.standby_nodes, "swaps": {}}
    evicted = sorted({n for nodes in rails.get("evicted", {}).values() for n in nodes})
    returnable = []
    for node in evicted:
        check = state.selfchecks.get(node)
        returnable.append({"node": node, "selfcheck": None if check is None else {
            "status": check.status, "passed": check.details.get("passed") is True, "ts": check.ts,
            "command_id": check.command_id}})
    return {
        "known": bool(rails),  # False until act has published its rails state once
        "breaker": rails.get("breaker", {"tripped": False, "reason": ""}),
        "approval_kinds": rails.get("approval_kinds", []),
        "rollout": rollout_view(rails.get("rollout"), rails.get("approval_kinds", [])),
        "pending": pending,
        "pool": {"spares": pool.get("spares", []), "swaps": pool.get("swaps", {})},
        "evicted": returnable,
        "lemons": lemons_view(rails.get("lemons")),
    }


def lemons_view(shown: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The quarantined (lemon) nodes act last published, each with why and its history, newest first.

    Only an operator's release (signed by the console like every command) lets one back into the pool.
    """
    rows = []
    for node, entry in sorted((shown or {}).items()):
        held = entry.get("quarantined") or {}
        history = [{"what": "incident", "id": i.get("id", ""), "kind": i.get("kind", ""), "job": i.get("job", ""),
                    "attempt": i.get("attempt", 0), "ts": i.get("ts", 0.0)} for i in entry.get("incidents", [])]
        history += [{"what": "failed self-check", "id": c.get("source", ""), "kind": "self_check", "job": "",
                     "attempt": 0, "ts": c.get("ts", 0.0)} for c in entry.get("selfchecks", [])]
        rows.append({"node": node, "reason": held.get("reason", ""), "since": held.get("ts", 0.0),
                     "history": sorted(history, key=lambda h: -float(h["ts"])),
                     "released": entry.get("released", [])})
    return rows


def rollout_view(shown: dict[str, Any] | None, approval_kinds: list[str] | None = None) -> dict[str, Any]:
    """Each kind's mode in force (and the rules that override theirs) as act last published them.

    A kind in `approval_kinds` never goes past approve, whatever its rollout mode: it is shown so.
    Empty until act has published its rails.
    """
    if not shown:
        return {"known": False, "default": "", "kinds": [], "rules": []}
    default, kinds, held = str(shown.get("default", "")), shown.get("kinds", {}), approval_kinds or []
    rows = []
    for kind in ROLLOUT_KINDS:
        mode = kinds.get(kind, default)
        capped = mode == "auto" and (kind in held or "*" in held)
        rows.append({"kind": kind, "mode": "approve" if capped else mode, "overridden": kind in kinds,
                     "approval_kind": capped})
    return {"known": True, "default": default, "kinds": rows,
            "rules": [{"rule": r, "mode": m} for r, m in sorted(shown.get("rules", {}).items())]}


def _step_result(state: ConsoleState, command_id: str) -> dict[str, Any] | None:
    results = state.results.get(command_id)
    if results:
        return to_json(results[-1])
    for entry in reversed(state.audit.get(command_id, ())):
        if entry.event == "result":  # a step the runner settled itself (blocked, skipped) is only audited
            return {"status": entry.detail.get("status"), "message": entry.detail.get("message", ""),
                    "details": entry.detail.get("details", {})}
    return None


def _finite(value: float | None) -> float | None:
    return value if value is not None and value == value and abs(value) != float("inf") else None
