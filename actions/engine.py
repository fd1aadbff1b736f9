"""The decision engine: one incident in, one explained plan out.

Pure: it reads the incident and what it knows of the job (checkpoints) and
returns a `Decision` recording the rule, the inputs and the alternatives it
considered. Executing the plan is someone else's job (`actions.executors`).
"""

from __future__ import annotations

from actions.checkpoints import CheckpointRegistry
from detectors.base import anomaly_id
from schemas.records import Decision, Incident, PlannedAction


class DecisionEngine:
    """Maps incidents to plans following ByteRobust's recovery principles."""

    def __init__(self, checkpoints: CheckpointRegistry, *, dry_run: bool = False) -> None:
        self.checkpoints = checkpoints
        self.dry_run = dry_run

    def decide(self, incident: Incident) -> Decision:
        """Choose the plan for one incident."""
        if incident.kind in ("nan", "loss_spike"):
            return self._restore_before_onset(incident)
        return self._decision(
            incident,
            rule="default.escalate",
            plan=[PlannedAction(action="escalate", nodes=incident.nodes, ranks=incident.ranks)],
            reason=f"no automatic policy for {incident.kind} yet; escalating to an operator",
        )

    def _restore_before_onset(self, incident: Incident) -> Decision:
        bad_step = incident.step
        ckpt = self.checkpoints.latest_before(incident.job, step=bad_step, ts=incident.onset)
        if ckpt is None:
            return self._decision(
                incident,
                rule=f"{incident.kind}.restore_checkpoint",
                plan=[PlannedAction(action="restart_from_checkpoint", params={"step": None, "path": None})],
                reason=f"{incident.kind} at step {bad_step}: no checkpoint before it is known; restart from scratch",
                alternatives=["evict: rejected, numeric faults are not localised to hardware by one occurrence"],
            )
        return self._decision(
            incident,
            rule=f"{incident.kind}.restore_checkpoint",
            plan=[
                PlannedAction(
                    action="restart_from_checkpoint",
                    ranks=[],
                    params={"step": ckpt.step, "path": ckpt.path, "before_step": bad_step},
                )
            ],
            reason=f"restore the latest checkpoint before step {bad_step}: step {ckpt.step} ({ckpt.path})",
            inputs={"bad_step": bad_step, "checkpoint_step": ckpt.step, "checkpoint_path": ckpt.path},
            alternatives=[
                "evict: rejected, a first NaN is usually numeric, not hardware",
                "skip the batch: rejected, optimizer state may already be poisoned",
            ],
        )

    def _decision(
        self,
        incident: Incident,
        *,
        rule: str,
        plan: list[PlannedAction],
        reason: str,
        inputs: dict[str, object] | None = None,
        alternatives: list[str] | None = None,
    ) -> Decision:
        return Decision(
            ts=incident.detected_at,
            id=anomaly_id("decision", incident.id),
            incident_id=incident.id,
            job=incident.job,
            kind=incident.kind,
            rule=rule,
            plan=plan,
            reason=reason,
            inputs={"incident": incident.id, "step": incident.step, **(inputs or {})},
            alternatives=alternatives or [],
            dry_run=self.dry_run,
        )
