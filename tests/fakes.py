"""The test suite's one set of fakes: executors, agents' answers, clocks and a sink standing in for the fleet.

Unit tests drive act's runner without agents, schedulers or a clock: these
are what stands in for them. Each fake records what it was asked, so a test
asserts on what the runner sent. One definition each, imported by every test
that needs it (a fake rewritten per file drifts from the others).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from trainguard.schemas.actions import AGENT_ACTIONS, CLUSTER_ACTIONS
from trainguard.schemas.records import ActionCommand, ActionResult, Record
from trainguard.schemas.selfcheck import neighbour_pairs

Reply = Callable[[ActionCommand, list[str]], ActionResult]
MACHINES = ["n0", "n1", "n2", "n3"]


def answer(status: str, *, per_node: dict[str, str] | None = None) -> Reply:
    """A reply with `status` (and, like agents' merged answers, a per-node word)."""
    def reply(command: ActionCommand, targets: list[str]) -> ActionResult:
        details: dict[str, Any] = {} if per_node is None else {"per_node": per_node}
        return ActionResult(ts=1.0, command_id=command.id, action=command.action, status=status,  # type: ignore[arg-type]
                            job=command.job, details=details)
    return reply


class RecordingExecutor:
    """An executor that answers ok (or `replies[action]`) and records every command with its targets.

    `fail_on` names an action whose command raises, as a process killed
    mid-plan would. Every command id is checked to carry 128 unpredictable
    bits: the runner must never send a guessable one.
    """

    def __init__(self, handles: frozenset[str] = AGENT_ACTIONS, replies: dict[str, dict[str, Any]] | None = None,
                 *, name: str = "recorder", fail_on: str = "") -> None:
        self.name, self.handles = name, handles
        self.replies = replies or {}
        self.fail_on = fail_on
        self.calls: list[tuple[ActionCommand, list[str]]] = []
        self.ids: list[str] = []

    @property
    def commands(self) -> list[ActionCommand]:
        return [command for command, _ in self.calls]

    @property
    def actions(self) -> list[str]:
        return [command.action for command, _ in self.calls]

    def execute(self, command: ActionCommand, *, targets: list[str]) -> ActionResult:
        assert len(command.id.rsplit("-", 1)[-1]) == 32, "command ids carry 128 unpredictable bits"
        self.ids.append(command.id)
        if command.action == self.fail_on:
            raise RuntimeError("killed mid-plan")
        self.calls.append((command, list(targets)))
        reply = self.replies.get(command.action, {})
        return ActionResult(ts=1.0, command_id=command.id, action=command.action, status=reply.get("status", "ok"),
                            job=command.job, details=reply.get("details", {}))


class FanOutAgents(RecordingExecutor):
    """Agents answering a fanned-out diagnosis each with their own machine's report; `bad`'s is wrong."""

    def __init__(self, bad: str, handles: frozenset[str] = AGENT_ACTIONS) -> None:
        super().__init__(handles)
        self.bad = bad

    def execute(self, command: ActionCommand, *, targets: list[str]) -> ActionResult:
        if command.action not in ("self_check", "replay_regroup"):
            return super().execute(command, targets=targets)
        self.calls.append((command, list(targets)))
        return agent_answer(command, self.bad)


class Scripted:
    """Every action, answered by `evict` for evictions and ok for the rest; records each call, thread-safely."""

    name = "scripted"
    handles = AGENT_ACTIONS | CLUSTER_ACTIONS

    def __init__(self, evict: Reply | None = None) -> None:
        self.evict = evict or answer("ok")
        self.calls: list[tuple[ActionCommand, list[str]]] = []
        self._lock = threading.Lock()

    def execute(self, command: ActionCommand, *, targets: list[str]) -> ActionResult:
        with self._lock:
            self.calls.append((command, list(targets)))
        if command.action == "evict_node":
            return self.evict(command, targets)
        return answer("ok")(command, targets)

    def sent(self, action: str) -> list[list[str]]:
        with self._lock:
            return [list(c.nodes) if c.nodes else t for c, t in self.calls if c.action == action]


class Clock:
    """Act's injected clock, moved by the test."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def world(machines: list[str] = MACHINES, ppn: int = 2) -> dict[str, dict[str, Any] | None]:
    """Every machine's self-check report, healthy: each rank passed each stage, same digest, every pair ok.

    Built the way `collectors.agent.selfcheck.machine.run_machine` writes them
    (one record per local rank per stage).
    """
    out: dict[str, dict[str, Any] | None] = {}
    for i, m in enumerate(machines):
        ranks = range(i * ppn, (i + 1) * ppn)
        pairs = {f"{a}|{b}": "ok" for a, b in neighbour_pairs(machines) if m in (a, b)}
        out[m] = {"machine": m, "node_rank": i, "dcgm": {"status": "unavailable"}, "stages": {
            "all_to_all": [{"rank": r, "machine": m, "status": "ok"} for r in ranks],
            "all_gather": [{"rank": r, "machine": m, "status": "ok", "pairs": dict(pairs)} for r in ranks],
            "bitwise": [{"rank": r, "machine": m, "status": "ok", "digest": "d0"} for r in ranks]}}
    return out


def agent_answer(command: ActionCommand, bad: str) -> ActionResult:
    """What the agent a fanned-out command names sends back; `bad`'s digests and replay sums are wrong."""
    machine, machines = command.nodes[0], command.params.machines
    if command.action == "self_check":
        report = world(machines, ppn=command.params.procs_per_machine)[machine]
        if machine == bad:
            for rec in report["stages"]["bitwise"]:  # type: ignore[index]
                rec["digest"] = "flipped"
    else:
        report = {"machine": machine, "stages": {"replay": [{"status": "ok", "ok": machine != bad}]}}
    return ActionResult(ts=1.0, command_id=command.id, action=command.action, status="ok", node=machine,
                        job=command.job, details={"per_node": {machine: "ok"}, "machine_report": report})


class ListSink:
    """The sink collectors publish into (the agent, the node loop, the training hook): keeps every record.

    Thread-safe: the heartbeat thread publishes too.
    """

    def __init__(self) -> None:
        self.records: list[Record] = []
        self._lock = threading.Lock()

    def publish(self, record: Record) -> None:
        with self._lock:
            self.records.append(record)

    def close(self, timeout_s: float = 10.0) -> bool:
        return True

    def stats(self) -> dict[str, int]:
        return {"spooled": 0}

    def of(self, kind: type) -> list:  # type: ignore[type-arg]
        with self._lock:
            return [r for r in self.records if isinstance(r, kind)]


def quiet_variants(detector: type[Any]) -> tuple[type[Any], type[Any]]:
    """Two variants of a detector class with a one-pass `_quiet(record)` path for samples that find nothing:
    one that counts how often that path answered (`.quiet`), and one without it (every record takes the
    full path). Equivalence tests feed both the same stream and compare what they find and keep."""

    class Counting(detector):  # type: ignore[misc, valid-type]
        quiet = 0

        def _quiet(self, record: Any, *rest: Any) -> bool:
            answer = bool(super()._quiet(record, *rest))
            self.quiet += answer
            return answer

    class FullPath(detector):  # type: ignore[misc, valid-type]
        def _quiet(self, record: Any, *rest: Any) -> bool:
            return False

    return Counting, FullPath


def same_findings(fast: Any, slow: Any, samples: list[Any], stream: int) -> int:
    """Feed both variants every sample; each must find what the other finds, sample by sample. The count found."""
    found = 0
    for sample in samples:
        a, b = fast.observe(sample), slow.observe(sample)
        assert [repr(x) for x in a] == [repr(x) for x in b], (stream, sample.ts)
        found += len(a)
    return found
