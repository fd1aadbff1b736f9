"""`trainguard backtest --report`'s rollout table: what `auto` would have done with the backtest's incidents.

Before promoting a kind from observe, a team replays a week of recorded topics:
every incident the detectors raise is decided by the real decision engine
(actions/engine.py) with every kind in `auto`, and nothing is executed. The
engine learns the recording's checkpoints and topologies in event-time order,
as act would have, so its plans name the same steps. Each plan's evictions
pass a shadow breaker and the cooldown (actions/rollout.py's `would_block`)
on event time, the only clock a recording has, so a burst of node faults
shows how many the breaker would have held. The rows are the shadow report's
(actions/shadow.py); nothing acted in the recording's history, so a saving is
the upper bound of the incidents' measured response time.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import msgspec

from trainguard.actions.checkpoints import CheckpointRegistry
from trainguard.actions.engine import DecisionEngine
from trainguard.actions.ettr import EttrAccount
from trainguard.actions.rollout import evictions_of, would_block
from trainguard.actions.safety import CircuitBreaker, Cooldown
from trainguard.actions.settings import ActionSettings
from trainguard.actions.shadow import RuleRow, responses, shadow_report
from trainguard.schemas.records import (
    ActionResult,
    CheckpointEvent,
    Decision,
    Incident,
    JobTopology,
    Record,
    TrainingStep,
)
from trainguard.streams.recording import read_recording


class _Shadow:
    """The engine and the rails' bookkeeping, fed in event-time order; executes nothing."""

    def __init__(self, cfg: ActionSettings) -> None:
        self.engine = DecisionEngine(CheckpointRegistry(), retry_window_s=cfg.retry_window_s,
                                     network_confirmations=cfg.network_confirmations, max_jobs=cfg.max_jobs)
        self.ettr = EttrAccount(max_jobs=cfg.max_jobs)
        limits = {"max_fraction": cfg.breaker_max_fraction, "window_s": cfg.breaker_window_s,
                  "fleet_size": cfg.fleet_size, "min_job_size": cfg.min_job_size,
                  "fleet_max_evictions": cfg.fleet_max_evictions}
        self.closed, self.shadow = CircuitBreaker(**limits), CircuitBreaker(**limits)  # type: ignore[arg-type]
        self.cooldown = Cooldown(cooldown_s=cfg.cooldown_s)
        self.decisions: list[Decision] = []

    def observe(self, record: Record) -> None:
        if isinstance(record, CheckpointEvent):
            self.engine.checkpoints.observe(record)
        elif isinstance(record, JobTopology):
            self.engine.observe_topology(record)
        elif isinstance(record, (TrainingStep, ActionResult)):
            self.ettr.observe(record)

    def decide(self, incident: Incident) -> None:
        self.ettr.observe(incident)
        decision = self.engine.decide(incident)
        topo = self.engine.topologies.get(decision.job)
        now = incident.detected_at
        blocked = would_block(decision, real=self.closed, shadow=self.shadow, cooldown=self.cooldown,
                              job_size=len(topo.nodes) if topo else 0, now=now)
        if not blocked:
            self.cooldown.record(evictions_of(decision), ts=now)
        self.decisions.append(msgspec.structs.replace(decision, status="observed", rollout="auto",
                                                      would_block=blocked))


def rollout_rows(recording: Path | str, incidents: Iterable[Incident], cfg: ActionSettings) -> list[RuleRow]:
    """Per rule: the backtest's incidents decided in `auto`, what their plans would have done."""
    shadow = _Shadow(cfg)
    pending = sorted(incidents, key=lambda i: i.detected_at)
    at = 0
    for event in read_recording(recording, on_error=lambda _err: None):  # the backtest reported bad lines
        while at < len(pending) and pending[at].detected_at <= event.ts:
            shadow.decide(pending[at])
            at += 1
        shadow.observe(event.value)
    for incident in pending[at:]:
        shadow.decide(incident)
    jobs = {d.job for d in shadow.decisions}
    episodes = {job: shadow.ettr.snapshot(job) for job in jobs}
    return shadow_report(shadow.decisions, modes={d.rule: "auto" for d in shadow.decisions},
                         response_s=responses(episodes))
