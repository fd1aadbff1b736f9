"""The action consumer's Kafka edge: incidents in; decisions, commands, audit out.

It follows checkpoint announcements (what to restore), the training topic
(job topologies, and steps for ETTR), agents' results (audited, including
rejections of forged commands) and the incidents. For each incident it asks
the pure `DecisionEngine` for a plan and the `PlanRunner` to journal it; the
incident's offset is committed only once its decision is journaled, then
the plan runs. A redelivered incident finds its decision in the journal and
causes no second action; a restarted consumer first resumes the journal's
unfinished plans.

Nothing on these topics is trusted by being there: an `ActionResult` counts
only when the node it names signed it (`security.node_public_keys`), and
where Kafka ACLs cannot restrict who writes incidents, only incidents the
worker signed are acted on (`security.worker_public_keys`). Whatever fails
is audited (`result_rejected`, `incident_rejected`) and otherwise ignored.
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
from actions.runner import PlanRunner
from schemas.codec import Codec, DecodeError
from schemas.records import (ActionResult, AuditEntry, CheckpointEvent, Decision, Incident, JobTopology, Record,
                             TrainingStep)
from schemas.signing import KeyRing, signed_by_node
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
    node_keys: KeyRing = field(default_factory=KeyRing)
    worker_keys: KeyRing = field(default_factory=KeyRing)
    client_options: dict[str, Any] = field(default_factory=dict)
    _producer: Any = None

    def publish(self, record: Record) -> None:
        """Send one record to its topic (audit entries key by job or subject)."""
        key = key_for(record) if not isinstance(record, AuditEntry) else str(record.detail.get("job", "")).encode()
        self._producer.send(self.topics.for_record(record), key=key or None, value=self.codec.encode(record))

    def run(self, on_decision: OnDecision, *, max_incidents: int | None = None, timeout_s: float | None = None) -> int:
        """Process until `max_incidents` decisions or `timeout_s`; return the count."""
        consumer = KafkaConsumer(*(self.topics.name(t) for t in (*_FOLLOWED, "action-results", "incidents")),
                                 bootstrap_servers=self.servers, group_id=self.group_id,
                                 enable_auto_commit=False, auto_offset_reset="earliest", **self.client_options)
        self._producer = KafkaProducer(bootstrap_servers=self.servers, acks="all", linger_ms=5,
                                       **self.client_options)
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
                        done += self._handle(msg.value, on_decision, consumer, tp, msg.offset, msg.headers)
                if polled:
                    self._producer.flush()
                    consumer.commit()
                self._resume()  # decisions approved by an operator since the last poll
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
                offset: int, headers: list[tuple[str, bytes]] | None = None) -> int:
        try:
            record = self.codec.decode(value)
        except DecodeError:
            return 0  # the worker dead-letters malformed input; here we only skip it
        problem = self._distrust(record, value, headers)
        if problem:
            self._reject(record, problem, tp, offset)
            return 0
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
        elif isinstance(record, Incident):
            return self._incident(record, on_decision, consumer, tp, offset)
        return 0

    def _distrust(self, record: Record, value: bytes, headers: list[tuple[str, bytes]] | None) -> str:
        """Why a result or incident must be ignored ("" if trusted)."""
        if isinstance(record, ActionResult):
            return signed_by_node(self.node_keys, value, headers, record.node)
        if isinstance(record, Incident) and self.worker_keys:
            return self.worker_keys.check(value, headers)[1]
        return ""

    def _reject(self, record: Record, problem: str, tp: TopicPartition, offset: int) -> None:
        is_result = isinstance(record, ActionResult)
        subject = record.command_id if isinstance(record, ActionResult) else getattr(record, "id", "")
        self.publish(AuditEntry(ts=time.time(), event="result_rejected" if is_result else "incident_rejected",
                                subject_id=subject,
                                actor="trainguard-act",
                                detail={"job": getattr(record, "job", ""), "node": getattr(record, "node", ""),
                                        "reason": problem, "topic": tp.topic, "offset": offset}))

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
