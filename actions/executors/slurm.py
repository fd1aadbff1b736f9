"""The Slurm executor: drain, resume and requeue with `scontrol`.

A drained node finishes nothing new; `Reason=` tells the admins who drained
it and why. After draining, the job is requeued (if its Slurm job id is
known) so the scheduler places it on healthy nodes. Output parsing is kept
apart from running the command so it is tested on literal strings.
"""

from __future__ import annotations

import re
import subprocess
from typing import TYPE_CHECKING, Any

from trainguard.actions.executors.base import Clock, invalid_nodes, refused
from trainguard.schemas.action_params import Removal
from trainguard.schemas.actions import CLUSTER_ACTIONS
from trainguard.schemas.records import ActionCommand, ActionResult

if TYPE_CHECKING:
    from trainguard.actions.executors.registry import ExecutorContext

_ERROR = re.compile(r"(slurm_\w+ error|error|Invalid)[^\n]*", re.IGNORECASE)


def parse_error(output: str) -> str:
    """The error scontrol printed, or "" when it printed none.

    >>> parse_error("slurm_update error: Invalid node name specified")
    'slurm_update error: Invalid node name specified'
    >>> parse_error("")
    ''
    """
    match = _ERROR.search(output)
    return match.group(0).strip() if match else ""


class SlurmExecutor:
    """Cluster verbs through the `scontrol` command line."""

    name = "slurm"
    handles = CLUSTER_ACTIONS

    def __init__(self, *, clock: Clock, scontrol: str = "scontrol", timeout_s: float = 30.0) -> None:
        self.clock = clock
        self.scontrol = scontrol
        self.timeout_s = timeout_s

    @classmethod
    def from_context(cls, ctx: ExecutorContext) -> SlurmExecutor:
        """Build from the `actions.slurm` settings section."""
        return cls(clock=ctx.clock, scontrol=ctx.settings.slurm.scontrol, timeout_s=ctx.settings.slurm.timeout_s)

    def execute(self, command: ActionCommand, *, targets: list[str]) -> ActionResult:
        """Drain (evict/cordon) or resume (uncordon) the nodes; requeue after an eviction."""
        nodes = targets or command.nodes
        if why := invalid_nodes(nodes):  # `gpu[001-999]` is a Slurm range: scontrol would drain them all
            return refused(command, why, ts=self.clock())
        calls: list[list[str]] = []
        if command.action == "uncordon_node":
            calls.append(["update", f"NodeName={','.join(nodes)}", "State=RESUME"])
        else:
            reason = f"trainguard: {command.params.reason or command.action} ({command.incident_id})"
            calls.append(["update", f"NodeName={','.join(nodes)}", "State=DRAIN", f"Reason={reason}"])
            named = command.params.slurm_job_id if isinstance(command.params, Removal) else ""
            job_id = named or (command.job if command.job.isdigit() else "")
            if command.action == "evict_node" and job_id:
                calls.append(["requeue", job_id])
        ran: list[dict[str, Any]] = []
        for args in calls:
            code, output = self._run(args)
            ran.append({"args": args, "code": code, "output": output})
            if code != 0:
                why = parse_error(output) or f"exit code {code}"
                return self._result(command, "failed", f"scontrol {args[0]}: {why}", ran)
        return self._result(command, "ok", "; ".join(" ".join(c["args"][:2]) for c in ran), ran)

    def mark_lemon(self, node: str, *, quarantined: bool, reason: str) -> dict[str, Any]:
        """Drain the node with a reason that names the quarantine (`sinfo -R` shows it to the admins).

        A release keeps it drained (it is still out of the pool) but says so, so nobody resumes a
        lemon thinking it was a routine drain, nor keeps one out that an operator released.
        """
        if why := invalid_nodes([node]):
            raise ValueError(why)
        text = (f"trainguard lemon: {reason}" if quarantined
                else f"trainguard: lemon released ({reason}), awaiting return")
        args = ["update", f"NodeName={node}", "State=DRAIN", f"Reason={text[:200]}"]
        code, output = self._run(args)
        if code != 0:
            raise RuntimeError(f"scontrol update: {parse_error(output) or f'exit code {code}'}")
        return {"args": args, "code": code}

    def _run(self, args: list[str]) -> tuple[int, str]:
        try:
            proc = subprocess.run([self.scontrol, *args], capture_output=True, text=True, timeout=self.timeout_s)
        except FileNotFoundError:
            return 127, f"error: {self.scontrol} not found on PATH"
        except subprocess.TimeoutExpired:
            return 124, f"error: scontrol timed out after {self.timeout_s:g}s"
        return proc.returncode, (proc.stdout + proc.stderr).strip()

    def _result(self, command: ActionCommand, status: str, message: str, calls: list[dict[str, Any]]) -> ActionResult:
        return ActionResult(ts=self.clock(), command_id=command.id, action=command.action, status=status,  # type: ignore[arg-type]
                            message=message, job=command.job, details={"calls": calls})
