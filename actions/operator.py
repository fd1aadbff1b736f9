"""Apply an operator's command (from the console) to the action consumer's state.

The console is a separate service without a signing key: it publishes an
`OperatorCommand` naming the authenticated operator, and the action consumer
applies it here. This module is pure: it takes the rails' journaled state
(the `"rails"` snapshot of breaker, standby pool and evicted nodes) and the
decision a command names, and returns the new state, the decision's new
status and the audit entry. Nothing is read from a clock or a socket, so the
same command on the same state always gives the same outcome, and a replayed
or stale command is judged by its own timestamp against the `now` it is given.

Why each guard:
* a command older than `max_age_s` is refused: a consumer group reading the
  operator topic from the start must not re-apply last week's breaker reset;
  so is one dated more than `max_age_s` ahead of act's clock (`now`, act's
  receive time), which would otherwise stay fresh for ever;
* approve and reject act only on a decision still awaiting approval, so a
  duplicate click or a redelivered command changes nothing;
* a rollout change (set_rollout) names a known mode and a subject of the
  form default, kind:<kind> or rule:<rule>; anything else is refused, so a
  typo never leaves a kind in a mode nobody chose;
* a node goes back to the standby pool only on a passing self-check that act
  itself holds (`checks`: a check act ran, or a result the node's own agent
  signed), never on a report carried in the command: whoever can write the
  operator topic could write `{"passed": true}`. A return uses the pass up,
  so a node evicted again needs a new check;
* a quarantined (lemon) node does not go back on a passing self-check at all
  (`actions.lemons`): only `release_node` lifts the quarantine, and it refuses a
  node that is not quarantined, so a typo never clears another node's history.
* a verdict names an incident act decided on and one of true, false,
  unsure (`actions.verdicts`); the same verdict again changes nothing.

Who may send a command at all is decided before this module is reached: act
verifies the console's signature (`actions.core.ActCore.trusts`).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

import msgspec

from trainguard.actions.lemons import is_quarantined, node_entry, release
from trainguard.actions.rollout import RolloutPolicy, apply_change, overridden
from trainguard.actions.verdicts import apply_verdict
from trainguard.schemas.records import AuditEntry, Decision, OperatorCommand

DEFAULT_MAX_AGE_S = 300.0


@dataclass(frozen=True)
class OperatorOutcome:
    """What applying one command changed, and the audit entry that says so."""

    applied: bool
    message: str
    rails: dict[str, Any]
    decision: Decision | None
    audit: AuditEntry
    rollout: dict[str, Any] | None = None  # set_rollout: the journaled operator overrides after it
    lemons: dict[str, Any] | None = None  # release_node: the journaled lemon state after it
    verdicts: dict[str, Any] | None = None  # verdict: the journaled verdicts after it


def apply_operator_command(command: OperatorCommand, *, rails: dict[str, Any], decision: Decision | None,
                           now: float, max_age_s: float = DEFAULT_MAX_AGE_S,
                           checks: dict[str, Any] | None = None, rollout: RolloutPolicy | None = None,
                           overrides: dict[str, Any] | None = None,
                           lemons: dict[str, Any] | None = None,
                           verdicts: dict[str, Any] | None = None) -> OperatorOutcome:
    """The new rails state and decision after `command`; inputs are not modified.

    `rails` is the journal's `"rails"` blob (`breaker`, `pool`, `evicted` ...);
    `decision` is the journaled decision `command.subject_id` names, if any;
    `checks` is act's own latest self-check verdict per node
    (`{node: {"passed": bool, ...}}`, see `record_selfcheck`);
    `rollout` is the policy in force and `overrides` the operators' journaled changes (set_rollout);
    `lemons` is the journaled lemon state (`actions.lemons`: return_node, release_node).
    `verdicts` the journaled verdicts (verdict: `decision` is then the decision of the incident named).
    """
    state = copy.deepcopy(rails)
    if now - command.ts > max_age_s:
        return _outcome(command, False, f"refused: command is {now - command.ts:.0f}s old (max {max_age_s:g}s)",
                        state, decision, now)
    if command.ts - now > max_age_s:  # dated ahead of act's clock: it would stay "fresh" for ever
        return _outcome(command, False, f"refused: command is dated {command.ts - now:.0f}s ahead of act's clock "
                        f"(max {max_age_s:g}s)", state, decision, now)
    if command.verb in ("approve", "reject"):
        return _decide(command, state, decision, now)
    if command.verb == "set_rollout":
        return _set_rollout(command, state, decision, now, rollout or RolloutPolicy(), overrides or {})
    if command.verb == "verdict":
        return _verdict(command, state, decision, now, verdicts or {})
    if command.verb == "reset_breaker":
        breaker = state.get("breaker", {})
        was = f"was tripped: {breaker.get('reason', '')}" if breaker.get("tripped") else "was not tripped"
        state["breaker"] = {"tripped": False, "reason": "", "evictions": []}
        return _outcome(command, True, f"circuit breaker reset ({was})", state, decision, now)
    if command.verb == "release_node":
        return _release_node(command, state, decision, now, lemons or {}, checks or {})
    if is_quarantined(lemons or {}, command.subject_id):
        return _outcome(command, False, f"{command.subject_id} stays out: quarantined as a lemon "
                        f"({node_entry(lemons or {}, command.subject_id)['quarantined'].get('reason', '')}); "
                        "a passing self-check does not return it, an operator's release_node does", state,
                        decision, now)
    return _return_node(command, state, decision, now, checks or {})


def _release_node(command: OperatorCommand, state: dict[str, Any], decision: Decision | None, now: float,
                  lemons: dict[str, Any], checks: dict[str, Any]) -> OperatorOutcome:
    """Lift a lemon's quarantine; with a passing self-check act holds, it goes back to the pool at once."""
    released, why = release(lemons, command.subject_id, operator=command.operator, reason=command.reason, now=now)
    if why:
        return _outcome(command, False, f"refused: {why}", state, decision, now)
    back = _return_node(command, state, decision, now, checks)
    then = f"; {back.message}" if back.applied else "; it returns to the standby pool on its next passing self-check"
    out = _outcome(command, True, f"{command.subject_id} released from quarantine by {command.operator}{then}",
                   back.rails if back.applied else state, decision, now)
    return dataclasses.replace(out, lemons=released)


def _set_rollout(command: OperatorCommand, state: dict[str, Any], decision: Decision | None, now: float,
                 policy: RolloutPolicy, overrides: dict[str, Any]) -> OperatorOutcome:
    changed, message = apply_change(policy, command.subject_id, command.mode)
    if changed is None:
        return _outcome(command, False, message, state, decision, now)
    out = _outcome(command, True, f"{message} by {command.operator}", state, decision, now)
    return dataclasses.replace(out, rollout=overridden(overrides, command.subject_id, command.mode))


def _verdict(command: OperatorCommand, state: dict[str, Any], decision: Decision | None, now: float,
             verdicts: dict[str, Any]) -> OperatorOutcome:
    changed, message = apply_verdict(command, verdicts, decision, now=now)
    out = _outcome(command, changed is not None, message, state, decision, now)
    return out if changed is None else dataclasses.replace(out, verdicts=changed)


def passing_selfcheck(report: dict[str, Any], node: str) -> bool:
    """True when `report` (a `trainguard selfcheck` JSON) passed and covered `node`."""
    machines = report.get("machines") or [m for s in report.get("stages", []) if isinstance(s, dict)
                                          for m in s.get("detail", {}).get("digests", {})]
    return report.get("passed") is True and node in machines


def _decide(command: OperatorCommand, state: dict[str, Any], decision: Decision | None,
            now: float) -> OperatorOutcome:
    if decision is None or decision.status != "awaiting_approval":
        status = "unknown" if decision is None else decision.status
        return _outcome(command, False, f"decision {command.subject_id} is not awaiting approval ({status})",
                        state, decision, now)
    new_status = "planned" if command.verb == "approve" else "blocked"
    updated = msgspec.structs.replace(decision, status=new_status)
    verb = "approved" if command.verb == "approve" else "rejected"
    why = f": {command.reason}" if command.reason else ""
    return _outcome(command, True, f"{verb} by {command.operator}{why}", state, updated, now)


def record_selfcheck(checks: dict[str, Any], nodes: list[str], *, passed: bool, source: str,
                     now: float) -> dict[str, Any]:
    """`checks` with the newest verdict of each of `nodes` (a failing check replaces a pass); a copy."""
    out = dict(checks)
    for node in nodes:
        out[node] = {"passed": passed, "source": source, "ts": now}
    return out


def _return_node(command: OperatorCommand, state: dict[str, Any], decision: Decision | None,
                 now: float, checks: dict[str, Any]) -> OperatorOutcome:
    node = command.subject_id
    verdict = checks.get(node)
    if not isinstance(verdict, dict) or verdict.get("passed") is not True:
        why = "its latest self-check failed" if isinstance(verdict, dict) else "act holds no self-check of it"
        return _outcome(command, False, f"{node} stays out: {why} (a report in the request counts for nothing)",
                        state, decision, now)
    pool = state.setdefault("pool", {"spares": [], "swaps": {}})
    spares = pool.setdefault("spares", [])
    if node in spares:
        return _outcome(command, False, f"{node} is already in the standby pool", state, decision, now)
    spares.append(node)
    for job, gone in state.get("evicted", {}).items():
        state["evicted"][job] = [n for n in gone if n != node]
    return _outcome(command, True, f"{node} returned to the standby pool ({len(spares)} ready)", state, decision, now)


def _outcome(command: OperatorCommand, applied: bool, message: str, state: dict[str, Any],
             decision: Decision | None, now: float) -> OperatorOutcome:
    detail: dict[str, Any] = {"command": command.id, "verb": command.verb, "applied": applied, "message": message,
                              "reason": command.reason}
    if command.verb == "set_rollout":
        detail["mode"] = command.mode
    if command.verb == "verdict":
        detail.update(verdict=command.verdict, note=command.reason,
                      rule=decision.rule if decision is not None else "")
    if decision is not None:
        detail["job"] = decision.job
        detail["incident"] = decision.incident_id
    audit = AuditEntry(ts=now, event=f"operator_{command.verb}", subject_id=command.subject_id or command.verb,
                       detail=detail, actor=command.operator)
    return OperatorOutcome(applied, message, state, decision, audit)
