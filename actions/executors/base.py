"""The one interface every executor implements, and how results merge.

An executor receives a signed `ActionCommand` and the nodes expected to
answer, does the work (or asks the agents to), and returns one
`ActionResult`. Cluster executors (Kubernetes, Slurm) only do cluster-level
actions; node-local ones (restarts, rollbacks, self-checks) always go to the
`trainguard run` agents, because the action consumer runs on the control
plane and cannot touch a training process itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from schemas.records import ActionCommand, ActionResult

CLUSTER_ACTIONS = frozenset({"evict_node", "cordon_node", "uncordon_node"})
AGENT_ACTIONS = frozenset({"restart_from_checkpoint", "hot_update", "rollback_code", "dump_stacks", "stop",
                           "self_check", "replay_regroup", "retry"})

Clock = Callable[[], float]


class Executor(Protocol):
    """Carries out commands of the kinds in `handles`."""

    name: str
    handles: frozenset[str]

    def execute(self, command: ActionCommand, *, targets: list[str]) -> ActionResult:
        """Do `command`; `targets` are the nodes expected to act (may be empty)."""
        ...


def merge_results(command: ActionCommand, results: list[ActionResult], *, ts: float,
                  missing: list[str] | None = None) -> ActionResult:
    """One result from many nodes' results: ok only if every node said ok.

    >>> c = ActionCommand(ts=0, id="c", action="stop")
    >>> ok = ActionResult(ts=1, command_id="c", action="stop", status="ok", node="a")
    >>> merge_results(c, [ok], ts=2).status, merge_results(c, [ok], ts=2, missing=["b"]).status
    ('ok', 'failed')
    """
    missing = missing or []
    statuses = [r.status for r in results]
    if missing or not results:
        status = "failed"
    elif "rejected" in statuses:
        status = "rejected"
    elif "failed" in statuses:
        status = "failed"
    elif all(s == "skipped" for s in statuses):
        status = "skipped"
    else:
        status = "ok"
    message = "; ".join(f"{r.node or '?'}: {r.status} {r.message}".strip() for r in results)
    if missing:
        message = (message + "; " if message else "") + f"no result from {', '.join(missing)} in time"
    details: dict[str, object] = {"per_node": {r.node or str(i): r.status for i, r in enumerate(results)}}
    for r in results:  # self-check verdicts (culprits, failed groups) travel up unchanged
        for key in ("culprits", "failed_groups", "stage", "passed"):
            if key in r.details:
                details[key] = r.details[key]
    return ActionResult(ts=ts, command_id=command.id, action=command.action, status=status,  # type: ignore[arg-type]
                        message=message, job=command.job, details=details)
