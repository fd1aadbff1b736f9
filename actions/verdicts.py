"""Verdicts from the people on call, and the precision of each rule and detector they give.

An operator marks an incident a true fault (`true`), a false alarm (`false`)
or `unsure`, with a note. Each incident holds one verdict, the newest: an
operator who learns more changes it, and the audit trail keeps every change.
Verdicts are journaled under act's `"verdicts"` state key (mirrored on
act-state, so a restarted or moved act keeps them), each with the rule,
kind and detector of the incident's decision, so precision is computed
without re-reading incidents.

Precision over a window: among the verdicts *given* in the last `window_s`
(act's clock at the time act applied them, the only clock act trusts), per
rule and per detector, `true / (true + false)`; `unsure` is counted but
excluded; `None` when there is no true or false verdict (an empty window
says nothing, and a 0 there would read as "all wrong").

A rule in `auto` whose precision is below `floor` on at least `min_verdicts`
true/false verdicts is *low*: act exports it (`trainguard_rule_precision_low`,
which the shipped alert rule pages on) and audits `rule_precision_low` when a
rule becomes low. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainguard.schemas.records import Decision, OperatorCommand

VALUES = ("true", "false", "unsure")
MAX_VERDICTS = 20_000  # incidents remembered; the oldest verdict goes first
MAX_NOTE = 2_000  # characters of a note kept
CLI_VERDICT_PREFIX = "verdict_request/"  # journal keys `trainguard actions verdict` leaves for act


@dataclass(frozen=True)
class VerdictPolicy:
    """How precision is judged: the window, and when a rule in auto is low enough to alert on."""

    window_s: float = 30 * 86400.0
    floor: float = 0.8
    min_verdicts: int = 5


def check_value(value: str) -> str:
    """`value` if it is a verdict; ValueError naming the choices otherwise (CLI and console)."""
    if value not in VALUES:
        raise ValueError(f"unknown verdict {value!r} (one of: {', '.join(VALUES)})")
    return value


def apply_verdict(command: OperatorCommand, verdicts: Mapping[str, Any], decision: Decision | None, *,
                  now: float, max_verdicts: int = MAX_VERDICTS) -> tuple[dict[str, Any] | None, str]:
    """The journaled verdicts after `command` (a copy), and what to audit; (None, why) when refused.

    `decision` is the journaled decision of the incident `command.subject_id` names: a verdict
    on an incident act never decided on is refused (a typo must not count for some other rule).
    The same verdict and note again changes nothing (a redelivered command or a double click).
    """
    incident, value = command.subject_id, command.verdict
    try:
        check_value(value)
    except ValueError as exc:
        return None, f"refused: {exc}"
    if decision is None:
        return None, f"refused: no decision for incident {incident!r} is known to act"
    note = command.reason[:MAX_NOTE]
    was = verdicts.get(incident)
    if isinstance(was, dict) and was.get("verdict") == value and was.get("note") == note:
        return None, f"incident {incident} is already marked {value}"
    entry = {"verdict": value, "note": note, "operator": command.operator, "ts": now, "rule": decision.rule,
             "kind": decision.kind, "detector": str(decision.inputs.get("detector", "")), "decision": decision.id}
    out = {k: v for k, v in verdicts.items() if k != incident}
    out[incident] = entry
    while len(out) > max_verdicts:  # the oldest given first
        del out[min(out, key=lambda k: float(out[k].get("ts", 0.0)))]
    before = f" (was {was.get('verdict')})" if isinstance(was, dict) else ""
    return out, f"incident {incident} marked {value}{before} by {command.operator}"


def precision(verdicts: Mapping[str, Any], *, now: float, window_s: float) -> dict[str, dict[str, dict[str, Any]]]:
    """`{"rules": {rule: row}, "detectors": {detector: row}}` over the verdicts given in the window.

    A row is `{"true": n, "false": n, "unsure": n, "precision": float | None}`.
    """
    out: dict[str, dict[str, dict[str, Any]]] = {"rules": {}, "detectors": {}}
    for entry in verdicts.values():
        if not isinstance(entry, dict) or now - float(entry.get("ts", 0.0)) > window_s:
            continue
        value = entry.get("verdict")
        if value not in VALUES:
            continue
        for scope, name in (("rules", entry.get("rule", "")), ("detectors", entry.get("detector", ""))):
            if name:
                row = out[scope].setdefault(str(name), {v: 0 for v in VALUES})
                row[value] += 1
    for rows in out.values():
        for row in rows.values():
            judged = row["true"] + row["false"]
            row["precision"] = round(row["true"] / judged, 4) if judged else None
    return out


def low_rules(rules: Mapping[str, Mapping[str, Any]], modes: Mapping[str, str], policy: VerdictPolicy) -> list[str]:
    """The rules in `auto` whose precision is below the floor on at least `min_verdicts` true/false verdicts."""
    low = []
    for rule, row in rules.items():
        judged = int(row.get("true", 0)) + int(row.get("false", 0))
        value = row.get("precision")
        if modes.get(rule) == "auto" and judged >= policy.min_verdicts and value is not None \
                and float(value) < policy.floor:
            low.append(rule)
    return sorted(low)


def counts_by_rule(rules: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """The shadow report's `verdicts` argument: rule -> {true, false, unsure}."""
    return {rule: {v: int(row.get(v, 0)) for v in VALUES} for rule, row in rules.items()}
