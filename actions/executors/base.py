"""The one interface every executor implements, and how results merge.

An executor receives a signed `ActionCommand` and the nodes expected to
answer, does the work (or asks the agents to), and returns one
`ActionResult`. Cluster executors (Kubernetes, Slurm) only do cluster-level
actions; node-local ones (restarts, rollbacks, self-checks) always go to the
`trainguard run` agents, because the action consumer runs on the control
plane and cannot touch a training process itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Protocol

from trainguard.schemas.records import ActionCommand, ActionResult

Clock = Callable[[], float]


class CommandBus(Protocol):
    """Where commands go and results come back from."""

    def send(self, command: ActionCommand) -> ActionCommand:
        """Publish one command, signed and stamped with its expiry; returns what was sent."""
        ...

    def collect(self, command_id: str, *, nodes: list[str], timeout_s: float) -> list[ActionResult]:
        """Results for `command_id` until every node in `nodes` answered (or one, if empty)."""
        ...


class Executor(Protocol):
    """Carries out commands of the actions it `handles` (read off the action table in schemas/actions.py).

    Which enabled executor gets each action is `actions.executors.registry.Routes`' job.
    """

    name: str

    @property
    def handles(self) -> frozenset[str]:
        """The action names this executor carries out (a class attribute in every executor)."""
        ...

    def execute(self, command: ActionCommand, *, targets: list[str]) -> ActionResult:
        """Do `command`; `targets` are the nodes expected to act (may be empty)."""
        ...


def _as_done(result: ActionResult) -> ActionResult:
    """An agent's "already executed" answer counts as the status it executed with.

    After a consumer restart the same command is sent again; the agent skips it
    and reports how it ended the first time. "ok" then means the step is done,
    with its effects (the node *was* stopped), not "skipped".
    """
    previous = result.details.get("previous_status")
    if result.status == "skipped" and previous in ("ok", "failed"):
        return ActionResult(ts=result.ts, command_id=result.command_id, action=result.action, status=previous,
                            message=result.message, job=result.job, node=result.node, details=result.details)
    return result


def merge_results(command: ActionCommand, results: list[ActionResult], *, ts: float,
                  missing: list[str] | None = None) -> ActionResult:
    """One result from many nodes' results: ok only if every node said ok.

    Only the nodes `command` addressed have a say: a result from any other node
    (its signature may be perfectly good) is left out entirely, its status, its
    message and its self-check details alike. A command naming no node takes all.

    >>> c = ActionCommand(ts=0, id="c", action="stop")
    >>> ok = ActionResult(ts=1, command_id="c", action="stop", status="ok", node="a")
    >>> merge_results(c, [ok], ts=2).status, merge_results(c, [ok], ts=2, missing=["b"]).status
    ('ok', 'failed')
    >>> to_b = ActionCommand(ts=0, id="c", action="stop", nodes=["b"])
    >>> merge_results(to_b, [ok], ts=2).details["per_node"]
    {}
    """
    missing = missing or []
    results = [_as_done(r) for r in results if not command.nodes or r.node in command.nodes]
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
        for key in ("culprits", "failed_groups", "stage", "passed", "machine_report"):
            if key in r.details:
                details[key] = r.details[key]
    return ActionResult(ts=ts, command_id=command.id, action=command.action, status=status,  # type: ignore[arg-type]
                        message=message, job=command.job, details=details)


# A host name as schedulers spell one: letters, digits, '-', '_' and '.', starting with a letter or
# digit. Anything else (`gpu[001-999]`, `*`, `a,b`, spaces) is a pattern or a list, never one node.
_HOSTNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
# Kubernetes node names are RFC 1123 subdomains: lower case, digits, '-' and '.'.
K8S_NODE = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*")


def invalid_nodes(nodes: list[str], pattern: re.Pattern[str] = _HOSTNAME) -> str:
    """Why `nodes` cannot be acted on, or "" when every name is one concrete node.

    A cluster verb on a range or glob would drain far more than the breaker
    counted, so such names are refused, never expanded.

    >>> invalid_nodes(["gpu001", "n-2.rack3"])
    ''
    >>> invalid_nodes(["gpu[001-999]"])
    "refusing node name 'gpu[001-999]': not a single node name (ranges, globs and lists are refused)"
    >>> invalid_nodes([])
    'refusing a command that names no node'
    """
    if not nodes:
        return "refusing a command that names no node"
    for node in nodes:
        if not isinstance(node, str) or not pattern.fullmatch(node):
            return f"refusing node name {node!r}: not a single node name (ranges, globs and lists are refused)"
    return ""


def refused(command: ActionCommand, why: str, *, ts: float) -> ActionResult:
    """The result of a command an executor would not carry out."""
    return ActionResult(ts=ts, command_id=command.id, action=command.action, status="rejected",
                        message=why, job=command.job)
