"""What the console knows: a pure projection of the topics act reads and writes.

Every record the console consumes goes through `ConsoleState.observe`, which
files it under its incident, decision, command, job or node and returns the
live events (for server-sent events) it gives rise to. Nothing here does I/O
or reads a clock, so a benchmark or a unit test fills it straight from
records, and every console replica that reads the same topics shows the same
page. Views (fleet, jobs, controls) are in `streams.console.views`.

Memory is bounded where history grows without end: step series keep the last
`max_points` steps per job, audit entries the last `max_audit` per subject,
anomalies the last `max_anomalies`; incidents and decisions are all kept
(10,000 incidents take a few tens of MB).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import msgspec

from trainguard.actions.ettr import EttrAccount, EttrReport
from trainguard.schemas.node_jobs import learn
from trainguard.schemas.records import (
    ActionCommand,
    ActionResult,
    Anomaly,
    AuditEntry,
    CheckpointEvent,
    Decision,
    Heartbeat,
    Incident,
    JobTopology,
    NodeGpuSample,
    OperatorCommand,
    Record,
    TrainingStep,
)

Event = dict[str, Any]
_FINAL_EVENTS = {"decision_executed": "executed", "decision_failed": "failed", "decision_blocked": "blocked"}


@dataclass
class JobSeries:
    """One job's step curve (one rank speaks for the job) and checkpoints."""

    rank: int | None = None
    steps: deque[tuple[float, int, float | None, float, float | None]] = field(default_factory=deque)
    checkpoints: list[CheckpointEvent] = field(default_factory=list)
    incidents: list[str] = field(default_factory=list)
    nodes: set[str] = field(default_factory=set)
    topology: JobTopology | None = None


@dataclass
class ConsoleState:
    """Incidents, decisions, commands, results, audit, jobs and nodes, as records arrive."""

    standby_nodes: list[str] = field(default_factory=list)
    max_points: int = 5000
    max_audit: int = 200
    max_anomalies: int = 50_000
    incidents: dict[str, Incident] = field(default_factory=dict)
    decisions: dict[str, Decision] = field(default_factory=dict)  # by decision id
    decision_of: dict[str, str] = field(default_factory=dict)  # incident id -> decision id
    status: dict[str, str] = field(default_factory=dict)  # decision id -> latest status
    commands: dict[str, list[ActionCommand]] = field(default_factory=dict)  # decision id -> commands
    results: dict[str, list[ActionResult]] = field(default_factory=dict)  # command id -> results
    audit: dict[str, deque[AuditEntry]] = field(default_factory=dict)  # subject id -> entries
    anomalies: OrderedDict[str, Anomaly] = field(default_factory=OrderedDict)
    jobs: dict[str, JobSeries] = field(default_factory=dict)
    node_job: dict[str, str] = field(default_factory=dict)
    node_seen: dict[str, float] = field(default_factory=dict)
    selfchecks: dict[str, ActionResult] = field(default_factory=dict)  # node -> latest self-check result
    rails: dict[str, Any] = field(default_factory=dict)  # act's latest `rails_state`
    ettr: EttrAccount = field(default_factory=EttrAccount)
    now: float = 0.0  # the newest event time seen; "recent" is judged against it, never the wall clock
    _rails_ts: float = float("-inf")
    _ettr_version: dict[str, int] = field(default_factory=dict)
    _ettr_cache: dict[str, tuple[int, EttrReport]] = field(default_factory=dict)

    def ettr_report(self, job: str) -> EttrReport:
        """`EttrAccount.report`, recomputed only after the job's account changed."""
        version = self._ettr_version.get(job, 0)
        cached = self._ettr_cache.get(job)
        if cached is None or cached[0] != version:
            cached = (version, self.ettr.report(job))
            self._ettr_cache[job] = cached
        return cached[1]

    def _account(self, record: Incident | ActionResult | TrainingStep) -> None:
        self.ettr.observe(record)
        self._ettr_version[record.job] = self._ettr_version.get(record.job, 0) + 1

    def observe(self, record: Record) -> list[Event]:
        """File one record; return the live events it causes (may be none)."""
        self.now = max(self.now, record.ts)
        handler = _HANDLERS.get(type(record))
        return handler(self, record) if handler is not None else []

    # ------------------------------------------------------------ handlers

    def _incident(self, inc: Incident) -> list[Event]:
        self.incidents[inc.id] = inc
        self._account(inc)
        self._job(inc.job).incidents.append(inc.id)
        return [{"type": "incident", "data": self.incident_row(inc)}]

    def _decision(self, dec: Decision) -> list[Event]:
        self.decisions[dec.id] = dec
        self.decision_of[dec.incident_id] = dec.id
        self.status.setdefault(dec.id, dec.status)
        return [{"type": "decision", "data": {"id": dec.id, "incident_id": dec.incident_id,
                                              "status": self.status[dec.id]}}]

    def _command(self, cmd: ActionCommand) -> list[Event]:
        self.commands.setdefault(cmd.decision_id, []).append(cmd)
        return []

    def _result(self, res: ActionResult) -> list[Event]:
        self.results.setdefault(res.command_id, []).append(res)
        self._account(res)
        if res.action == "self_check":
            for node in _checked_nodes(res):
                self.selfchecks[node] = res
        return [{"type": "result", "data": {"command_id": res.command_id, "status": res.status}}]

    def _audit(self, entry: AuditEntry) -> list[Event]:
        if entry.event == "rails_state":
            if entry.ts < self._rails_ts:  # audit entries of several partitions interleave: keep the newest
                return []
            self._rails_ts = entry.ts
            self.rails = dict(entry.detail)
            return [{"type": "rails", "data": self.rails}]
        self.audit.setdefault(entry.subject_id, deque(maxlen=self.max_audit)).append(entry)
        new_status = _FINAL_EVENTS.get(entry.event)
        if entry.event in ("approved", "operator_approve") and entry.detail.get("applied", True):
            new_status = "planned"
        if entry.event == "operator_reject" and entry.detail.get("applied"):
            new_status = "blocked"
        final = self.status.get(entry.subject_id) in _FINAL_EVENTS.values()
        if new_status and entry.subject_id in self.decisions and not (final and new_status == "planned"):
            self.status[entry.subject_id] = new_status  # a late approval (other partition) never undoes an outcome
        return [{"type": "audit", "data": audit_row(entry)}]

    def _step(self, step: TrainingStep) -> list[Event]:
        self._account(step)
        self._saw_node(step.node, step.job, step.ts)
        series = self._job(step.job)
        series.nodes.add(step.node)
        if series.rank is None:
            series.rank = step.rank
        if step.rank == series.rank:
            series.steps.append((step.ts, step.step, step.loss, step.step_time_s, step.mfu))
            while len(series.steps) > self.max_points:
                series.steps.popleft()
        return []

    def _heartbeat(self, beat: Heartbeat) -> list[Event]:
        self._saw_node(beat.node, beat.job, beat.ts)
        self._job(beat.job).nodes.add(beat.node)
        return []

    def _gpu(self, sample: NodeGpuSample) -> list[Event]:
        self._saw_node(sample.node, sample.job, sample.ts)
        return []

    def _topology(self, topo: JobTopology) -> list[Event]:
        series = self._job(topo.job)
        series.topology = topo
        for node in topo.rank_nodes.values():
            series.nodes.add(node)
            self.node_job.setdefault(node, topo.job)
            self.node_seen.setdefault(node, topo.ts)
        return []

    def _checkpoint(self, ckpt: CheckpointEvent) -> list[Event]:
        self._job(ckpt.job).checkpoints.append(ckpt)
        return []

    def _anomaly(self, anomaly: Anomaly) -> list[Event]:
        self.anomalies[anomaly.id] = anomaly
        while len(self.anomalies) > self.max_anomalies:
            self.anomalies.popitem(last=False)
        return []

    def _operator(self, cmd: OperatorCommand) -> list[Event]:
        return [{"type": "operator", "data": {"id": cmd.id, "verb": cmd.verb, "operator": cmd.operator,
                                              "subject_id": cmd.subject_id}}]

    # ------------------------------------------------------------ helpers

    def _job(self, job: str) -> JobSeries:
        return self.jobs.setdefault(job, JobSeries())

    def _saw_node(self, node: str, job: str, ts: float) -> None:
        if not node:
            return
        if job:
            learn(self.node_job, node, job)
        self.node_seen[node] = max(ts, self.node_seen.get(node, ts))

    def decision_for(self, incident_id: str) -> Decision | None:
        """The decision act took for an incident, if one was published."""
        did = self.decision_of.get(incident_id)
        return self.decisions.get(did) if did else None

    def incident_row(self, inc: Incident) -> dict[str, Any]:
        """The one-line summary of an incident the list shows."""
        dec = self.decision_for(inc.id)
        return {"id": inc.id, "kind": inc.kind, "job": inc.job, "nodes": inc.nodes, "ranks": inc.ranks,
                "detected_at": inc.detected_at, "onset": inc.onset, "group": inc.group,
                "decision": None if dec is None else {"id": dec.id, "rule": dec.rule, "status": self.status[dec.id]}}


def audit_row(entry: AuditEntry) -> dict[str, Any]:
    """An audit entry as plain JSON."""
    return {"ts": entry.ts, "event": entry.event, "subject_id": entry.subject_id, "actor": entry.actor,
            "detail": entry.detail}


def to_json(record: Record) -> dict[str, Any]:
    """A record as plain JSON-able builtins."""
    out = msgspec.to_builtins(record)
    assert isinstance(out, dict)
    return out


def _checked_nodes(result: ActionResult) -> list[str]:
    machines = result.details.get("machines")
    if isinstance(machines, list):
        return [str(m) for m in machines]
    return [result.node] if result.node else []


_HANDLERS: dict[type, Any] = {
    Incident: ConsoleState._incident, Decision: ConsoleState._decision, ActionCommand: ConsoleState._command,
    ActionResult: ConsoleState._result, AuditEntry: ConsoleState._audit, TrainingStep: ConsoleState._step,
    Heartbeat: ConsoleState._heartbeat, NodeGpuSample: ConsoleState._gpu, JobTopology: ConsoleState._topology,
    CheckpointEvent: ConsoleState._checkpoint, Anomaly: ConsoleState._anomaly, OperatorCommand: ConsoleState._operator,
}
