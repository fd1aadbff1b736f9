"""Lemon nodes: a node implicated in repeated incidents is quarantined until an operator releases it.

A node that faults, is evicted, passes its self-check and goes back to the
standby pool can fault again in the next job that gets it: a self-check sees
a moment, the history sees the pattern. This module keeps each node's
history of implications (incident id, kind, job, attempt, time) and failed
self-checks and decides quarantine from it:

* `incidents` distinct incidents of a lemon kind within `window_s`, across
  jobs and attempts (the same incident replayed, or redelivered, counts once:
  history is keyed by incident id), or
* `failed_selfchecks` failed self-checks (each check's command id counts once),
  within the same window.

A quarantined node is never returned to the standby pool by a passing
self-check (`actions.operator`, `actions.runner.PlanRunner.poll_operator`
ask `is_quarantined`); only an operator's signed `release_node` lifts it,
and the release starts its count afresh (the history stays, for the console).

Which incidents implicate a node: `kinds` implicate every node they name
(hw_fault and sdc are faults of the machine itself); `localised_kinds`
(network, slowdown) implicate a node only when the incident names exactly
that one node, since a fabric-wide slowdown names many nodes and is none's
fault.

Pure: times are given (act's clock as the runner uses it, never a record's
date nor the wall clock read here), state is a plain dict journaled as the
`"lemons"` blob (mirrored on act-state with the rest of the journal), and
nothing here does I/O.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainguard.schemas.kinds import BLAMES_A_LONE_NODE, BLAMES_EVERY_NODE

STATE_KEY = "lemons"
DEFAULT_KINDS = BLAMES_EVERY_NODE  # schemas.kinds: the machine's own faults
DEFAULT_LOCALISED = BLAMES_A_LONE_NODE  # the node only when it is the one named
MAX_HISTORY = 64  # entries kept per node: enough for the console; a lemon is decided long before


@dataclass(frozen=True)
class LemonPolicy:
    """When a node is a lemon (`actions.lemons` settings)."""

    incidents: int = 3
    window_s: float = 7 * 86400.0
    failed_selfchecks: int = 2
    kinds: tuple[str, ...] = DEFAULT_KINDS
    localised_kinds: tuple[str, ...] = DEFAULT_LOCALISED
    enabled: bool = True


@dataclass(frozen=True)
class Change:
    """What one observation did: the new state, and the node quarantined by it (if any)."""

    state: dict[str, Any]
    quarantined: str = ""
    reason: str = ""
    counted: list[str] = field(default_factory=list)  # nodes whose history grew


class LemonMarker(Protocol):
    """An executor that can show a node's quarantine where operators look (optional)."""

    def mark_lemon(self, node: str, *, quarantined: bool, reason: str) -> dict[str, Any]:
        """Apply (or lift) the node's quarantine mark; what was done, for the audit trail."""
        ...


def implicated(policy: LemonPolicy, kind: str, nodes: list[str]) -> list[str]:
    """The nodes an incident of `kind` naming `nodes` implicates.

    >>> p = LemonPolicy()
    >>> implicated(p, "hw_fault", ["a", "b"]), implicated(p, "network", ["a", "b"]), implicated(p, "network", ["a"])
    (['a', 'b'], [], ['a'])
    >>> implicated(p, "nan", ["a"])
    []
    """
    if not policy.enabled:
        return []
    unique = list(dict.fromkeys(n for n in nodes if n))
    if kind in policy.kinds:
        return unique
    if kind in policy.localised_kinds and len(unique) == 1:
        return unique
    return []


def node_entry(state: dict[str, Any], node: str) -> dict[str, Any]:
    """A node's record (a copy; empty history if unknown)."""
    entry = state.get("nodes", {}).get(node) or {}
    return {"incidents": list(entry.get("incidents", [])), "selfchecks": list(entry.get("selfchecks", [])),
            "quarantined": entry.get("quarantined"), "released": list(entry.get("released", [])),
            "since": float(entry.get("since", 0.0))}


def is_quarantined(state: dict[str, Any], node: str) -> bool:
    """Whether `node` is quarantined now."""
    return bool(node_entry(state, node)["quarantined"])


def quarantined(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every quarantined node with its whole record (what the console and the gauge show)."""
    return {n: node_entry(state, n) for n in sorted(state.get("nodes", {})) if is_quarantined(state, n)}


def note_incident(state: dict[str, Any], policy: LemonPolicy, *, incident_id: str, kind: str, job: str,
                  attempt: int, nodes: list[str], now: float) -> Change:
    """Add an incident to the history of the nodes it implicates; quarantine the first that crosses the bar."""
    out = copy.deepcopy(state)
    counted: list[str] = []
    hit, why = "", ""
    for node in implicated(policy, kind, nodes):
        entry = node_entry(out, node)
        if any(i.get("id") == incident_id for i in entry["incidents"]):
            continue  # the same incident replayed or redelivered: counted once
        entry["incidents"] = [*entry["incidents"], {"id": incident_id, "kind": kind, "job": job,
                                                    "attempt": attempt, "ts": now}][-MAX_HISTORY:]
        counted.append(node)
        reason = _verdict(entry, policy, now)
        if reason and not entry["quarantined"]:
            entry["quarantined"] = {"ts": now, "reason": reason}
            hit, why = hit or node, why or reason
        _put(out, node, entry)
    return Change(out, hit, why, counted)


def note_selfcheck(state: dict[str, Any], policy: LemonPolicy, *, node: str, passed: bool, source: str,
                   now: float) -> Change:
    """Count a failed self-check of `node` (once per `source`); a pass changes nothing here."""
    if passed or not policy.enabled or not node:
        return Change(state)
    out = copy.deepcopy(state)
    entry = node_entry(out, node)
    if any(c.get("source") == source for c in entry["selfchecks"]):
        return Change(state)
    entry["selfchecks"] = [*entry["selfchecks"], {"source": source, "ts": now}][-MAX_HISTORY:]
    reason = _verdict(entry, policy, now)
    hit = ""
    if reason and not entry["quarantined"]:
        entry["quarantined"] = {"ts": now, "reason": reason}
        hit = node
    _put(out, node, entry)
    return Change(out, hit, reason if hit else "", [node])


def release(state: dict[str, Any], node: str, *, operator: str, reason: str, now: float) -> tuple[dict[str, Any], str]:
    """(new state, "") after an operator's release of `node`; (state, why not) if it is not quarantined.

    The history stays (the console shows it); only what happens after the release counts towards
    the next quarantine, so a released node is not quarantined again by the incidents that made it a lemon.
    """
    entry = node_entry(state, node)
    if not entry["quarantined"]:
        known = "has no lemon history" if not (entry["incidents"] or entry["selfchecks"]) else "is not quarantined"
        return state, f"{node} {known}: nothing to release"
    out = copy.deepcopy(state)
    entry["released"] = [*entry["released"], {"ts": now, "operator": operator, "reason": reason,
                                              "was": entry["quarantined"]}][-MAX_HISTORY:]
    entry["quarantined"] = None
    entry["since"] = now
    _put(out, node, entry)
    return out, ""


def _verdict(entry: dict[str, Any], policy: LemonPolicy, now: float) -> str:
    """Why the node is a lemon now ("" if it is not), counting only since its last release, within the window."""
    start = max(entry["since"], now - policy.window_s)
    incidents = [i for i in entry["incidents"] if float(i.get("ts", 0.0)) >= start]
    checks = [c for c in entry["selfchecks"] if float(c.get("ts", 0.0)) >= start]
    days = policy.window_s / 86400.0
    if len(incidents) >= policy.incidents:
        jobs = sorted({str(i.get("job", "")) for i in incidents})
        kinds = sorted({str(i.get("kind", "")) for i in incidents})
        return (f"{len(incidents)} {'/'.join(kinds)} incidents in {days:g} days "
                f"(jobs {', '.join(jobs)}; threshold {policy.incidents})")
    if len(checks) >= policy.failed_selfchecks:
        return f"{len(checks)} failed self-checks in {days:g} days (threshold {policy.failed_selfchecks})"
    return ""


def _put(state: dict[str, Any], node: str, entry: dict[str, Any]) -> None:
    state.setdefault("nodes", {})[node] = entry
