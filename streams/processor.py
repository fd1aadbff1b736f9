"""Bytes in, records routed, bytes out: the worker's logic without Kafka.

`MessageProcessor` decodes each raw message with the strict codec. A message
that fails becomes a `DeadLetter` carrying the reason and the original
bytes, so nothing is silently dropped and nothing crashes the worker. Good
records go to the `DetectionPipeline`; its anomalies and incidents come back
as encoded messages for the output topics. The Faust agents, the live
benchmark and the tests all drive this one class.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

from detectors.pipeline import DetectionPipeline
from schemas.codec import Codec, DecodeError
from schemas.records import Anomaly, DeadLetter, Incident, Record
from schemas.signing import Signer
from schemas.topics import TOPIC_RECORDS, Topics, key_for, tag_of


@dataclass(frozen=True)
class RawMessage:
    """One consumed Kafka message."""

    topic: str
    value: bytes | None
    key: bytes | None = None
    partition: int = -1
    offset: int = -1
    timestamp: float = 0.0


@dataclass(frozen=True)
class OutMessage:
    """One message to produce."""

    topic: str
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]] | None = None  # the detached signature of a signed incident


@dataclass
class ProcessorStats:
    """Counters exported as Prometheus metrics by the worker."""

    processed: int = 0
    dead_lettered: int = 0
    anomalies: int = 0
    incidents: int = 0
    by_topic: dict[str, int] = field(default_factory=dict)


class MessageProcessor:
    """Decode, validate, detect; produce anomalies, incidents, dead letters."""

    def __init__(self, pipeline: DetectionPipeline, topics: Topics, codec: Codec | None = None,
                 signer: Signer | None = None) -> None:
        self.pipeline = pipeline
        self.signer = signer  # signs incidents where Kafka ACLs cannot keep others from writing them
        self.topics = topics
        self.codec = codec or Codec()
        self.stats = ProcessorStats()
        self._logical: dict[str, str] = {}  # physical -> logical topic name, cached (hot path)

    def process(self, message: RawMessage) -> list[OutMessage]:
        """Handle one message; never raises on bad input."""
        self.stats.processed += 1
        logical = self._logical.get(message.topic) or self._logical.setdefault(
            message.topic, self.topics.logical(message.topic))
        self.stats.by_topic[logical] = self.stats.by_topic.get(logical, 0) + 1
        try:
            record = self._decode(message, logical)
        except DecodeError as exc:
            return [self._dead_letter(message, str(exc))]
        anomalies, incidents = self.pipeline.process(record)
        return self._outputs(anomalies, incidents)

    def process_batch(self, messages: list[RawMessage]) -> list[OutMessage]:
        """Handle a batch in order (amortises per-call overhead)."""
        out: list[OutMessage] = []
        for message in messages:
            out.extend(self.process(message))
        return out

    def advance(self, ts: float) -> list[OutMessage]:
        """Advance event time with no message (idle ticks)."""
        anomalies, incidents = self.pipeline.advance(ts)
        return self._outputs(anomalies, incidents)

    def _decode(self, message: RawMessage, logical: str) -> Record:
        if message.value is None:
            raise DecodeError("empty message (tombstone)")
        record: Record = self.codec.decode(message.value)
        allowed = TOPIC_RECORDS.get(logical)
        if allowed is not None and tag_of(record) not in allowed:
            raise DecodeError(f"record type {tag_of(record)!r} does not belong on topic {logical!r}", "type")
        return record

    def _dead_letter(self, message: RawMessage, reason: str) -> OutMessage:
        self.stats.dead_lettered += 1
        letter = DeadLetter(
            ts=message.timestamp,
            source_topic=message.topic,
            reason=reason,
            original_b64=base64.b64encode(message.value or b"").decode(),
            partition=message.partition,
            offset=message.offset,
            key_b64=base64.b64encode(message.key or b"").decode(),
        )
        return OutMessage(self.topics.name("dead-letter"), message.key or b"", self.codec.encode(letter))

    def _outputs(self, anomalies: list[Anomaly], incidents: list[Incident]) -> list[OutMessage]:
        if not anomalies and not incidents:  # the common case, on the hot path
            return []
        self.stats.anomalies += len(anomalies)
        self.stats.incidents += len(incidents)
        out = [OutMessage(self.topics.name("anomalies"), key_for(a), self.codec.encode(a)) for a in anomalies]
        for incident in incidents:
            value = self.codec.encode(incident)
            headers = self.signer.headers(value) if self.signer else None
            out.append(OutMessage(self.topics.name("incidents"), key_for(incident), value, headers))
        return out
