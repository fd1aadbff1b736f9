"""The action consumer's Kafka edge: incidents in, decisions and audit out.

It follows the checkpoint announcements (to know what to restore) and the
incidents, asks the pure `DecisionEngine` for a plan, and publishes the
decision and an audit entry. Offsets are committed only after the outputs
are flushed, so a crash redelivers rather than loses an incident.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from kafka import KafkaConsumer, KafkaProducer

from actions.checkpoints import CheckpointRegistry
from actions.engine import DecisionEngine
from schemas.codec import Codec, DecodeError
from schemas.records import AuditEntry, CheckpointEvent, Decision, Incident
from schemas.topics import Topics, key_for


@dataclass
class ActionLoop:
    """Consume incidents and checkpoints; decide; publish; call `on_decision`."""

    servers: str
    topics: Topics
    engine: DecisionEngine
    checkpoints: CheckpointRegistry
    group_id: str = "trainguard-actions"
    codec: Codec = Codec()

    def run(
        self,
        on_decision: Callable[[Incident, Decision], None],
        *,
        max_incidents: int | None = None,
        timeout_s: float | None = None,
    ) -> int:
        """Process until `max_incidents` decisions or `timeout_s`; return the count."""
        consumer = KafkaConsumer(
            self.topics.name("checkpoints"),
            self.topics.name("incidents"),
            bootstrap_servers=self.servers,
            group_id=self.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        producer = KafkaProducer(bootstrap_servers=self.servers, acks="all", linger_ms=5)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        incidents = self.topics.name("incidents")
        done = 0
        try:
            while (max_incidents is None or done < max_incidents) and (deadline is None or time.monotonic() < deadline):
                polled = consumer.poll(timeout_ms=500)
                if any(tp.topic == incidents for tp in polled):
                    polled = self._with_checkpoints_caught_up(consumer, polled)
                for _, messages in sorted(polled.items(), key=lambda kv: kv[0].topic == incidents):
                    for msg in messages:
                        done += self._handle(msg.value, producer, on_decision)
                if polled:
                    producer.flush()
                    consumer.commit()
        finally:
            producer.flush()
            producer.close()
            consumer.close()
        return done

    def _with_checkpoints_caught_up(self, consumer: KafkaConsumer, polled: dict) -> dict:  # type: ignore[type-arg]
        """Read every checkpoint announcement published so far before deciding.

        An incident asks "which checkpoint precedes the onset?"; answering it
        from a half-read checkpoint topic would restore too far back.
        """
        topic = self.topics.name("checkpoints")
        parts = [tp for tp in consumer.assignment() if tp.topic == topic]
        others = [tp for tp in consumer.assignment() if tp.topic != topic]
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

    def _handle(self, value: bytes, producer: KafkaProducer, on_decision: Callable[[Incident, Decision], None]) -> int:
        try:
            record = self.codec.decode(value)
        except DecodeError:
            return 0  # the worker dead-letters malformed input; here we only skip it
        if isinstance(record, CheckpointEvent):
            self.checkpoints.observe(record)
            return 0
        if not isinstance(record, Incident):
            return 0
        decision = self.engine.decide(record)
        producer.send(self.topics.name("decisions"), key=key_for(decision), value=self.codec.encode(decision))
        audit = AuditEntry(ts=decision.ts, event="decision", subject_id=decision.id, actor="trainguard-act",
                           detail={"incident": record.id, "rule": decision.rule, "reason": decision.reason,
                                   "dry_run": decision.dry_run})
        producer.send(self.topics.name("audit"), key=record.job.encode(), value=self.codec.encode(audit))
        on_decision(record, decision)
        return 1
