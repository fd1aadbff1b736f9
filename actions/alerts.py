"""What an incident or a decision looks like to a pager or a chat channel, and how often to say it.

Pure: the Alertmanager alert and Slack message for a record, and a token
bucket that keeps a flapping fleet from flooding either. The I/O edge
(Kafka in, HTTP out) is streams/alerts/router.py.

Alertmanager: alerts in the shape of its v2 API (`POST /api/v2/alerts`, a
JSON list), so Alertmanager, or anything that accepts its alerts, routes,
groups and silences them. Slack: an incoming-webhook message (`{"text"}`),
which Mattermost and Rocket.Chat accept too. A decision carries its reason,
its rule and its plan, so the on-call engineer sees why trainguard acted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from trainguard.schemas.kinds import (
    SEVERITY as SEVERITY,  # critical for faults that stop a job: a column of the kinds table
)
from trainguard.schemas.records import Decision, Incident

BLOCKED = frozenset({"blocked", "awaiting_approval", "failed"})


def _time(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def alertmanager_alert(record: Incident | Decision, *, generator_url: str = "") -> dict[str, Any]:
    """One Alertmanager v2 alert. Labels identify it (Alertmanager dedupes on them); annotations explain."""
    labels = {"alertname": "TrainguardIncident" if isinstance(record, Incident) else "TrainguardDecision",
              "training_job": record.job, "kind": record.kind, "severity": severity(record),
              "incident_id": record.id if isinstance(record, Incident) else record.incident_id}
    if isinstance(record, Incident):
        annotations = {"summary": incident_summary(record),
                       "description": f"nodes {', '.join(record.nodes) or '-'}; ranks {record.ranks or '-'}"}
        starts = record.onset
    else:
        labels.update(rule=record.rule, status=record.status)
        annotations = {"summary": decision_summary(record), "description": record.reason,
                       "plan": plan_text(record)}
        starts = record.ts
    alert: dict[str, Any] = {"labels": labels, "annotations": annotations, "startsAt": _time(starts)}
    if generator_url:
        alert["generatorURL"] = generator_url
    return alert


def slack_message(record: Incident | Decision, *, suppressed: int = 0) -> dict[str, Any]:
    """An incoming-webhook message; `suppressed` says how many were held back by the rate limit."""
    if isinstance(record, Incident):
        text = f":rotating_light: *{incident_summary(record)}*\nnodes: {', '.join(record.nodes) or '-'}"
    else:
        icon = ":no_entry:" if record.status in BLOCKED else ":wrench:"
        text = (f"{icon} *{decision_summary(record)}*\n*why:* {record.reason}\n*plan:* {plan_text(record)}\n"
                f"rule `{record.rule}`, incident `{record.incident_id}`")
    if suppressed:
        text += f"\n_({suppressed} earlier alert(s) suppressed by the rate limit)_"
    return {"text": text}


def severity(record: Incident | Decision) -> str:
    """critical for faults that stop a job (and for blocked/failed decisions), else warning."""
    if isinstance(record, Decision) and record.status in BLOCKED:
        return "critical"
    return SEVERITY.get(record.kind, "warning")


def incident_summary(inc: Incident) -> str:
    """One line: what and where.

    >>> incident_summary(Incident(ts=0, id="i", kind="hang", job="llm", onset=0, detected_at=0))
    'hang on job llm'
    """
    return f"{inc.kind} on job {inc.job}"


def decision_summary(d: Decision) -> str:
    """One line: the decision's status, fault and job."""
    dry = " (dry-run)" if d.dry_run else " (observe mode: nothing sent)" if d.status == "observed" else ""
    return f"{d.status} decision for {d.kind} on job {d.job}{dry}"


def plan_text(d: Decision) -> str:
    """The plan as one line: `evict_node[n3] -> restart_from_checkpoint`."""
    return " -> ".join(f"{p.action}[{','.join(p.nodes)}]" if p.nodes else p.action for p in d.plan) or "none"


@dataclass
class TokenBucket:
    """At most `burst` messages at once and `per_minute` on average; counts what it held back.

    >>> t = [0.0]; b = TokenBucket(per_minute=60, burst=2, clock=lambda: t[0])
    >>> [b.allow() for _ in range(3)], b.suppressed
    ([True, True, False], 1)
    >>> t[0] = 1.0; b.allow(), b.take_suppressed(), b.suppressed
    (True, 1, 0)
    """

    per_minute: float
    burst: int
    clock: Callable[[], float]
    tokens: float = field(init=False)
    stamp: float = field(init=False)
    suppressed: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.tokens = float(self.burst)
        self.stamp = self.clock()

    def allow(self) -> bool:
        """Spend a token if there is one; otherwise count the message as suppressed."""
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.per_minute / 60)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        self.suppressed += 1
        return False

    def take_suppressed(self) -> int:
        """How many were held back since the last message that went out (and reset)."""
        n, self.suppressed = self.suppressed, 0
        return n
