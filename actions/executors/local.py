"""The local executor: commands go to the `trainguard run` node agents.

It touches no process: it hands the command to a `CommandBus` (Kafka in
production, see `streams.act.command_bus`, which signs the exact bytes it sends)
and waits, up to a timeout, for each target agent's `ActionResult`. An agent
that does not answer in time counts as a failure, never as a success. It
handles every action an agent can carry out (`AGENT_EXECUTABLE`): `evict_node`
becomes `stop` on the evicted node and `retry` a restart from the latest
checkpoint, since the agents implement only node-local verbs. Listed after a
cluster executor (`[kubernetes, local]`), it gets only the agent actions.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import msgspec

from trainguard.actions.executors.base import Clock, invalid_nodes, merge_results, refused
from trainguard.actions.executors.base import CommandBus as CommandBus  # re-exported: the bus's protocol lives in base

if TYPE_CHECKING:
    from trainguard.actions.executors.registry import ExecutorContext
from trainguard.schemas.actions import AGENT_EXECUTABLE, AGENT_TRANSLATION, agent_params
from trainguard.schemas.records import ActionCommand, ActionResult


class LocalExecutor:
    """Talks to node agents over a command bus."""

    name = "local"
    handles = AGENT_EXECUTABLE

    def __init__(self, *, bus: CommandBus, timeout_s: float, clock: Clock) -> None:
        self.bus = bus
        self.timeout_s = timeout_s
        self.clock = clock

    @classmethod
    def from_context(cls, ctx: ExecutorContext) -> LocalExecutor:
        """Build on act's command bus (`actions.command_timeout_s` per command)."""
        if ctx.command_bus is None:
            raise ValueError("the local executor needs the command bus to the node agents")
        return cls(bus=ctx.command_bus, timeout_s=ctx.settings.command_timeout_s, clock=ctx.clock)

    def execute(self, command: ActionCommand, *, targets: list[str]) -> ActionResult:
        """Send, wait for the targets' results, merge them."""
        if why := invalid_nodes(targets):  # never a command to "every agent of the job"
            return refused(command, why, ts=self.clock())
        if command.action == "cordon_node" and not command.job:  # no job's process to stop there
            return ActionResult(ts=self.clock(), command_id=command.id, action=command.action, status="skipped",
                                message="nothing to cordon without a cluster scheduler", job=command.job)
        wire = command
        if command.action in AGENT_TRANSLATION:
            wire = msgspec.structs.replace(command, action=AGENT_TRANSLATION[command.action],
                                           params=agent_params(command.action, command.params))
        wire = self.bus.send(wire)
        results = [r for r in self.bus.collect(wire.id, nodes=targets, timeout_s=self.timeout_s) if r.node in targets]
        answered = {r.node for r in results}
        missing = [n for n in targets if n not in answered]
        merged = merge_results(wire, results, ts=self.clock(), missing=missing)
        return msgspec.structs.replace(merged, action=command.action)

    def execute_all(self, commands: list[ActionCommand]) -> list[ActionResult]:
        """Send every command, then collect each (one per machine of a fanned-out self-check).

        All agents start at once and one thread waits for them all: results that
        arrive while another command's are awaited are kept by the bus, so the
        wait is the slowest agent's, not the sum, and a thousand machines need
        no thousand threads. Each command names its own targets.
        """
        sent: list[tuple[ActionCommand, ActionResult | None]] = []
        for command in commands:
            why = invalid_nodes(list(command.nodes))
            sent.append((command, refused(command, why, ts=self.clock())) if why else (self.bus.send(command), None))
        deadline = time.monotonic() + self.timeout_s
        out: list[ActionResult] = []
        for wire, early in sent:
            if early is not None:
                out.append(early)
                continue
            targets = list(wire.nodes)
            results = self.bus.collect(wire.id, nodes=targets, timeout_s=max(0.0, deadline - time.monotonic()))
            answered = {r.node for r in results}
            out.append(merge_results(wire, results, ts=self.clock(), missing=[n for n in targets if n not in answered]))
        return out
