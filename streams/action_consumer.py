"""The action consumer's Kafka edge: incidents in; decisions, commands, audit out.

It follows checkpoint announcements (what to restore), the training topic
(job topologies, and steps for ETTR), agents' results (audited, including
rejections of forged commands) and the incidents. For each incident it asks
the pure `DecisionEngine` for a plan and the `PlanRunner` to journal it; the
incident's offset is committed only once its decision is journaled, then
the plan runs. A redelivered incident finds its decision in the journal and
causes no second action; a restarted consumer first resumes the journal's
unfinished plans. Operator commands from the console (`operator` topic)
are applied by the pure `actions.operator` and audited under the operator's
name; the rails' state (breaker, standby pool) is published as a
`rails_state` audit entry whenever it changes, for the console to show.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaConsumer, KafkaProducer
from kafka.structs import OffsetAndMetadata, TopicPartition

from actions.checkpoints import CheckpointRegistry
from actions.engine import DecisionEngine
from actions.ettr import EttrAccount
from actions.operator import DEFAULT_MAX_AGE_S, apply_operator_command
from actions.runner import PlanRunner
from schemas.codec import Codec, DecodeError
from schemas.records import (ActionResult, AuditEntry, CheckpointEvent, Decision, Incident, JobTopology,
                             OperatorCommand, Record, TrainingStep)
from schemas.topics import Topics, key_for
from streams.action_metrics import ActionMetrics

OnDecision = Callable[[Incident, Decision], None]
_FOLLOWED = ("checkpoints", "training")


@dataclass
class ActionLoop:
    """Consume, decide, journal, commit, execute; call `on_decision` for each."""

    servers: str
    topics: Topics
    engine: DecisionEngine
    checkpoints: CheckpointRegistry
    runner: PlanRunner | None = None
    group_id: str = "trainguard-actions"
    codec: Codec = field(default_factory=Codec)
    ettr: EttrAccount = field(default_factory=EttrAccount)
    metrics: ActionMetrics = field(default_factory=ActionMetrics)
    operator_max_age_s: float = DEFAULT_MAX_AGE_S
    _producer: Any = None
    _rails_shown: Any = None

    def publish(self, record: Record) -> None:
        """Send one record to its topic (audit entries key by job or subject)."""
        key = key_for(record) if not isinstance(record, AuditEntry) else str(record.detail.get("job", "")).encode()
        self._producer.send(self.topics.for_record(record), key=key or None, value=self.codec.encode(record))

    def run(self, on_decision: OnDecision, *, max_incidents: int | None = None, timeout_s: float | None = None) -> int:
        """Process until `max_incidents` decisions or `timeout_s`; return the count."""
        consumer = KafkaConsumer(*(self.topics.name(t) for t in (*_FOLLOWED, "action-results", "operator", "incidents")),
                                 bootstrap_servers=self.servers, group_id=self.group_id,
                                 enable_auto_commit=False, auto_offset_reset="earliest")
        self._producer = KafkaProducer(bootstrap_servers=self.servers, acks="all", linger_ms=5)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        incidents = self.topics.name("incidents")
        done = 0
        try:
            self._resume()
            while (max_incidents is None or done < max_incidents) and (deadline is None or time.monotonic() < deadline):
                polled = consumer.poll(timeout_ms=500)
                if any(tp.topic == incidents for tp in polled):
                    polled = self._with_state_caught_up(consumer, polled)
                for tp, messages in sorted(polled.items(), key=lambda kv: kv[0].topic == incidents):
                    for msg in messages:
                        done += self._handle(msg.value, on_decision, consumer, tp, msg.offset)
                if polled:
                    self._producer.flush()
                    consumer.commit()
                self._resume()  # decisions approved by an operator since the last poll
                self._show_rails()
        finally:
            self._producer.flush()
            self._producer.close()
            consumer.close()
        return done

    def _with_state_caught_up(self, consumer: KafkaConsumer, polled: dict) -> dict:  # type: ignore[type-arg]
        """Read every checkpoint and topology published so far before deciding.

        An incident asks "which checkpoint precedes the onset?" and "which
        group contains the suspects?"; answering from a half-read topic
        would restore too far back or evict the wrong group.
        """
        names = {self.topics.name(t) for t in _FOLLOWED}
        parts = [tp for tp in consumer.assignment() if tp.topic in names]
        others = [tp for tp in consumer.assignment() if tp.topic not in names]
        if not parts:
            return polled
        ends = consumer.end_offsets(parts)
        merged = {tp: list(msgs) for tp, msgs in polled.items()}
        consumer.pause(*others)
        try:
            for _ in range(100):
                if all(consumer.position(tp) >= ends[tp] for tp in parts):
                    break
                for tp, msgs in consumer.poll(timeout_ms=200).items():
                    merged.setdefault(tp, []).extend(msgs)
        finally:
            consumer.resume(*others)
        return merged

    def _handle(self, value: bytes, on_decision: OnDecision, consumer: KafkaConsumer, tp: TopicPartition,
                offset: int) -> int:
        try:
            record = self.codec.decode(value)
        except DecodeError:
            return 0  # the worker dead-letters malformed input; here we only skip it
        if isinstance(record, CheckpointEvent):
            self.checkpoints.observe(record)
        elif isinstance(record, JobTopology):
            self.engine.observe_topology(record)
        elif isinstance(record, TrainingStep):
            self.ettr.observe(record)
        elif isinstance(record, ActionResult):
            self.ettr.observe(record)
            self.publish(AuditEntry(ts=record.ts, event="action_result", subject_id=record.command_id,
                                    actor=record.node or "agent",
                                    detail={"job": record.job, "action": record.action, "status": record.status,
                                            "message": record.message}))
        elif isinstance(record, OperatorCommand):
            self._operator(record)
        elif isinstance(record, Incident):
            return self._incident(record, on_decision, consumer, tp, offset)
        return 0

    def _operator(self, command: OperatorCommand) -> None:
        """Apply a console operator's command to the journaled rails and decision; audit it."""
        if self.runner is None:
            self.publish(AuditEntry(ts=time.time(), event=f"operator_{command.verb}", actor=command.operator,
                                    subject_id=command.subject_id or command.verb,
                                    detail={"command": command.id, "applied": False, "message": "act runs without "
                                            "a plan runner (dry run): nothing to apply"}))
            return
        runner = self.runner
        runner._save_state()  # the journal's rails blob now mirrors the live rails exactly
        decision = runner.journal.get(command.subject_id) if command.verb in ("approve", "reject") else None
        out = apply_operator_command(command, rails=runner.journal.get_state("rails"), decision=decision,
                                     now=time.time(), max_age_s=self.operator_max_age_s)
        if out.applied:
            runner.journal.put_state("rails", out.rails)
            runner._load_state()
            if out.decision is not None and out.decision is not decision:
                runner.journal.update_decision(out.decision)
        self.publish(out.audit)

    def _show_rails(self) -> None:
        """Publish the breaker and standby pool when they changed (the console's view of them)."""
        if self.runner is None:
            return
        rails = self.runner.rails
        shown = {"breaker": {"tripped": rails.breaker.tripped, "reason": rails.breaker.trip_reason},
                 "pool": rails.pool.snapshot(), "approval_kinds": list(rails.approval_kinds),
                 "evicted": {j: sorted(ns) for j, ns in self.runner.evicted.items()}}
        if shown != self._rails_shown:
            self._rails_shown = shown
            self.publish(AuditEntry(ts=time.time(), event="rails_state", subject_id="rails",
                                    actor="trainguard-act", detail=shown))

    def _incident(self, incident: Incident, on_decision: OnDecision, consumer: KafkaConsumer, tp: TopicPartition,
                  offset: int) -> int:
        self.ettr.observe(incident)
        decision = self.engine.decide(incident)
        if self.runner is not None:
            admitted = self.runner.admit(decision)
            if admitted is None:  # redelivered: already decided, maybe already acted on
                self._producer.flush()
                return 0
            decision = admitted
        self.publish(decision)
        self._producer.flush()
        consumer.commit({tp: OffsetAndMetadata(offset + 1, "", -1)})  # journaled: safe to move on
        self.metrics.decided(kind=decision.kind, rule=decision.rule, status=decision.status)
        if self.runner is not None:
            decision = self._execute(decision)
        on_decision(incident, decision)
        return 1

    def _execute(self, decision: Decision) -> Decision:
        assert self.runner is not None
        final = self.runner.run(decision)
        for result in self.runner.journal.steps(decision.id):
            self.metrics.acted(action=result.action, status=result.status)
        rails = self.runner.rails
        self.metrics.rails(breaker_tripped=rails.breaker.tripped, pool_size=rails.pool.size)
        report = self.ettr.report(final.job)
        self.metrics.ettr(job=final.job, ettr=report.ettr, unproductive_s=report.unproductive_s)
        if final.status != decision.status:
            self.publish(AuditEntry(ts=final.ts, event="incident_summary", subject_id=final.incident_id,
                                    actor="trainguard-act",
                                    detail={"job": final.job, "decision": final.id, "status": final.status,
                                            "rule": final.rule, "ettr": report.as_dict()}))
        self._producer.flush()
        return final

    def _resume(self) -> None:
        if self.runner is None:
            return
        self.runner.poll_operator()
        for decision in self.runner.journal.unfinished():
            self._execute(decision)
