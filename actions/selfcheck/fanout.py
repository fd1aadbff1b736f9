"""Act's side of a self-check: one signed command per machine, one verdict from all.

A stop-time diagnosis (`self_check`, `replay_regroup`) over N machines is
not run from one node: that node would start every machine's check ranks
itself (2N processes on one host) and test only its own GPUs and links.
Instead the plan runner hands the step to `FanOut.run`, which

1. derives from the step's (journaled) command one command per machine,
   addressed to that machine's agent only, carrying the shared check id, the
   rendezvous (global rank 0's host and a port, both from the job's machine
   list and settings), the world (machines, ranks per machine), this
   machine's node rank, the stages and a wall-clock deadline;
2. sends them all at once through the node executor (the command bus signs
   each one like every other command), each agent running only its own
   ranks (`collectors.agent.selfcheck.machine`), cross-machine stages meeting over
   TCP in one gloo world;
3. collects each machine's signed `ActionResult` and combines the reports
   with the pure `verdict.aggregate` (or `aggregate_replay`). An agent that
   did not answer by the deadline is reported as silent and named, never
   counted as passing.

Per-machine command ids are derived from the journaled command's id and the
machine, so a restarted act re-sends the very same commands and the agents
answer "already executed" instead of running the check twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

import msgspec

from trainguard.schemas.action_params import MachineCheck, Rendezvous, Replay, SelfCheck
from trainguard.schemas.records import ActionCommand, ActionResult
from trainguard.schemas.selfcheck import DEFAULT_CHECKS, SelfCheckReport, aggregate, aggregate_replay

REPORT_KEY = "machine_report"  # where an agent's result carries its machine's report (see merge_results)
ANSWER_SLACK_S = 5.0  # the deadline comes this long before the executor stops waiting for answers


class FanOutSettings(Protocol):
    """What the fan-out reads from `actions.selfcheck` (see `actions.settings.SelfCheckSettings`)."""

    rendezvous_host: str
    rendezvous_port: int
    rendezvous_ports: int
    procs_per_machine: int
    collective_timeout_s: float
    budget_s: float


class NodeExecutor(Protocol):
    """The node executor as the fan-out uses it (`actions.executors.local.LocalExecutor`)."""

    def execute(self, command: ActionCommand, *, targets: list[str]) -> ActionResult: ...


@runtime_checkable
class BatchExecutor(Protocol):
    """An executor that sends many commands before waiting (`LocalExecutor.execute_all`)."""

    def execute_all(self, commands: list[ActionCommand]) -> list[ActionResult]: ...


def rendezvous_for(check_id: str, machines: list[str], settings: FanOutSettings) -> Rendezvous:
    """Global rank 0's address: the first machine (host template) and a port spread by check id.

    >>> class S: rendezvous_host, rendezvous_port, rendezvous_ports = "{node}.train.svc", 29400, 1
    >>> rendezvous_for("c1", ["n7", "n8"], S())  # type: ignore[arg-type]
    Rendezvous(host='n7.train.svc', port=29400)
    """
    spread = int(hashlib.sha256(check_id.encode()).hexdigest()[:8], 16) % max(1, settings.rendezvous_ports)
    return Rendezvous(host=settings.rendezvous_host.format(node=machines[0]), port=settings.rendezvous_port + spread)


def machine_commands(command: ActionCommand, machines: list[str], *, settings: FanOutSettings,
                     deadline: float) -> list[ActionCommand]:
    """One command per machine (pure): same check, own node rank, own agent only."""
    p = command.params
    shared = MachineCheck(check_id=command.id, machines=machines, node_rank=0, deadline=deadline,
                          rendezvous=rendezvous_for(command.id, machines, settings), reason=p.reason,
                          timeout_s=settings.collective_timeout_s)
    if isinstance(p, Replay | SelfCheck) and p.timeout_s is not None:
        shared = msgspec.structs.replace(shared, timeout_s=p.timeout_s)
    if isinstance(p, Replay):
        shared = msgspec.structs.replace(shared, checks=["replay"], groups=p.groups, phase=p.phase)
    elif isinstance(p, SelfCheck):
        shared = msgspec.structs.replace(shared, checks=list(p.checks or DEFAULT_CHECKS),
                                         procs_per_machine=p.procs_per_machine or settings.procs_per_machine)
    return [msgspec.structs.replace(command, id=machine_command_id(command.id, m), nodes=[m],
                                    params=msgspec.structs.replace(shared, node_rank=i))
            for i, m in enumerate(machines)]


def machine_command_id(check_id: str, machine: str) -> str:
    """A per-machine id, stable across re-sends, as unpredictable as the check's own.

    >>> machine_command_id("d-1-" + "a" * 32, "n3") == machine_command_id("d-1-" + "a" * 32, "n3")
    True
    """
    prefix = check_id.rsplit("-", 1)[0]
    return f"{prefix}-{hashlib.sha256(f'{check_id}|{machine}'.encode()).hexdigest()[:32]}"


def report_of(machine: str, result: ActionResult) -> dict[str, Any] | None:
    """A machine's report from its agent's result; None when the agent never answered."""
    per_node = result.details.get("per_node")
    if isinstance(per_node, dict) and machine not in per_node:
        return None
    report = result.details.get(REPORT_KEY)
    if isinstance(report, dict) and report.get("machine") == machine:
        return report
    return {"status": result.status}  # answered, but without its report (e.g. "already executed")


def combine(command: ActionCommand, sent: ActionCommand, machines: list[str], results: dict[str, ActionResult], *,
            ts: float) -> ActionResult:
    """The step's one result (for `command`) from every machine's result (pure).

    `sent` is any one machine's command: it holds the check's world and stages.
    """
    reports = {m: report_of(m, results[m]) for m in machines}
    world = sent.params
    if not isinstance(world, MachineCheck):
        raise TypeError(f"combine reads a machine's command, not {type(world).__name__}")
    report: SelfCheckReport
    if command.action == "replay_regroup":
        report = aggregate_replay(world.groups, reports)
    else:
        report = aggregate(machines, reports, checks=world.checks, ppn=world.procs_per_machine)
    silent = [m for m in machines if reports[m] is None]
    details = {**report.as_dict(), "machines": machines, "phase": world.phase,
               "per_node": {m: results[m].status if reports[m] is not None else "silent" for m in machines},
               "silent": silent, "commands": {m: results[m].command_id for m in machines}}
    where = f" at {report.stage}" if report.stage else ""
    named = f", names {', '.join(report.culprits)}" if report.culprits else ""
    message = f"{command.action} over {len(machines)} machines: {'passed' if report.passed else 'failed'}{where}"
    return ActionResult(ts=ts, command_id=command.id, action=command.action,
                        status="ok" if report.passed else "failed", message=message + named,
                        job=command.job, details=details)


class FanOut:
    """Runs a diagnosis step on every machine's agent at once."""

    def __init__(self, settings: FanOutSettings, *, clock: Callable[[], float]) -> None:
        self.settings, self.clock = settings, clock

    def run(self, executor: NodeExecutor, command: ActionCommand, machines: list[str]) -> ActionResult:
        """Send each machine its command, wait for all (up to the deadline), combine."""
        if isinstance(command.params, Replay):  # every member of a group
            machines = list(dict.fromkeys([*machines, *(m for g in command.params.groups for m in g)]))
        wait_s = float(getattr(executor, "timeout_s", self.settings.budget_s + ANSWER_SLACK_S))
        deadline = self.clock() + max(1.0, min(self.settings.budget_s, wait_s - ANSWER_SLACK_S))
        commands = machine_commands(command, machines, settings=self.settings, deadline=deadline)
        if isinstance(executor, BatchExecutor):  # the local executor: send all, one thread waits
            results = dict(zip(machines, executor.execute_all(commands)))
        else:
            with ThreadPoolExecutor(max_workers=max(1, len(commands)), thread_name_prefix="selfcheck") as pool:
                results = dict(zip(machines, pool.map(lambda c: executor.execute(c, targets=list(c.nodes)),
                                                      commands)))
        return combine(command, commands[0], machines, results, ts=self.clock())
