"""Act's side of lemon nodes: journal each implication, and show a quarantine where operators look.

`actions.lemons` decides; this keeps its state in the journal (`"lemons"`,
mirrored on act-state, so a SIGKILLed act, or a fresh one rebuilt from the
topic, knows every node's history), takes a quarantined node out of the
standby pool, audits the quarantine (`lemon_quarantined`) and asks the
executor that evicts nodes to mark it (Kubernetes: the `TrainguardLemon`
NodeCondition and an Event; Slurm: the drain reason; local: recorded in
the audit entry). The mark is applied on the plan pool, never on the
thread that reads incidents; a mark that fails is audited and the
quarantine holds all the same (the journal, not the cluster, is the truth).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from trainguard.actions import lemons
from trainguard.actions.lemons import LemonMarker, LemonPolicy
from trainguard.actions.runner import PlanRunner
from trainguard.schemas.records import AuditEntry, Decision, Record

log = logging.getLogger(__name__)
Submit = Callable[[Callable[[], None]], object]


class Quarantine:
    """Journal implications and failed self-checks; quarantine, mark and release lemon nodes."""

    def __init__(self, *, runner: PlanRunner, policy: LemonPolicy, publish: Callable[[Record], None],
                 submit: Submit, gauge: Callable[[int], None]) -> None:
        self.runner = runner
        self.policy = policy
        self.publish = publish
        self.submit = submit
        self.gauge = gauge

    def state(self) -> dict[str, Any]:
        """The journaled lemon state (caller may hold the runner's lock)."""
        return self.runner.journal.get_state(lemons.STATE_KEY)

    def incident(self, decision: Decision, nodes: list[str]) -> None:
        """Count a decided incident against the nodes it implicates (once per incident id)."""
        runner = self.runner
        with runner.lock:
            attempt = max(runner.attempts.get(decision.job, 0), runner.reported_attempt(decision.job))
            change = lemons.note_incident(self.state(), self.policy, incident_id=decision.incident_id,
                                          kind=decision.kind, job=decision.job, attempt=attempt, nodes=nodes,
                                          now=runner.clock())
            if change.counted:
                runner.journal.put_state(lemons.STATE_KEY, change.state)
        self._after(change, mark=not decision.dry_run and decision.status != "observed")

    def selfcheck(self, node: str, *, passed: bool, source: str) -> None:
        """Count a failed self-check of `node` (once per check); a pass changes nothing here."""
        runner = self.runner
        with runner.lock:
            change = lemons.note_selfcheck(self.state(), self.policy, node=node, passed=passed, source=source,
                                           now=runner.clock())
            if change.counted:
                runner.journal.put_state(lemons.STATE_KEY, change.state)
        self._after(change, mark=True)

    def released(self, node: str, operator: str) -> None:
        """After an operator's applied release: lift the mark, update the gauge."""
        self.show()
        self.submit(lambda: self._mark(node, quarantined=False, reason=f"released by {operator}"))

    def show(self) -> None:
        """Set the gauge from the journal."""
        self.gauge(len(lemons.quarantined(self.state())))

    def _after(self, change: lemons.Change, *, mark: bool) -> None:
        node = change.quarantined
        if not node:
            return
        runner = self.runner
        with runner.lock:
            pooled = node in runner.rails.pool.spares
            if pooled:  # a spare that turned lemon must not be handed to the next job
                runner.rails.pool.spares.remove(node)
                runner._save_state()
        entry = lemons.node_entry(change.state, node)
        self.publish(AuditEntry(ts=runner.clock(), event="lemon_quarantined", subject_id=node, actor="trainguard-act",
                                detail={"node": node, "reason": change.reason, "removed_from_pool": pooled,
                                        "incidents": entry["incidents"], "selfchecks": entry["selfchecks"],
                                        "marked": mark}))
        self.show()
        if mark:
            self.submit(lambda: self._mark(node, quarantined=True, reason=change.reason))

    def _mark(self, node: str, *, quarantined: bool, reason: str) -> None:
        """Ask the evicting executor to show (or lift) the quarantine; audit what it did."""
        executor = self.runner.routes.for_action("evict_node")
        marker: LemonMarker | None = executor if hasattr(executor, "mark_lemon") else None  # type: ignore[assignment]
        try:
            done = marker.mark_lemon(node, quarantined=quarantined, reason=reason) if marker else {"recorded": True}
            status = "ok"
        except Exception as exc:  # the API is down or refuses: audited, the journal's quarantine holds
            log.warning("lemon mark of %s failed: %s", node, exc)
            done, status = {"error": str(exc)}, "failed"
        self.publish(AuditEntry(ts=self.runner.clock(), event="lemon_marked", subject_id=node, actor="trainguard-act",
                                detail={"node": node, "quarantined": quarantined, "reason": reason, "status": status,
                                        "executor": getattr(executor, "name", ""), "done": done}))
