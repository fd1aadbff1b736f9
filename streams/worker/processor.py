"""Bytes in, records routed, bytes out: the worker's logic without Kafka.

`MessageProcessor` decodes each raw message with the strict codec. A message
that fails becomes a `DeadLetter` carrying the reason and the original
bytes, so nothing is silently dropped and nothing crashes the worker. Good
records go to the `DetectionPipeline`; its anomalies and incidents come back
as encoded messages for the output topics. The worker's batch loop, the
benchmarks and the tests all drive this one class.

A fetch is handled by `process_fetch`: each partition's messages are
decoded and judged by the `EventClock` (a record dated too far ahead is
held or dead-lettered, never moving time), the accepted records of all
partitions are merged in event-time order, and the pipeline's time is
capped at the guarded watermark. Messages are read straight from the Kafka
client's records (anything with topic/value/key/partition/offset/timestamp
in ms); nothing is copied per message.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.schemas.codec import RECORD_TYPES, Codec, DecodeError, record_tag
from trainguard.schemas.records import Anomaly, DeadLetter, Incident, Record
from trainguard.schemas.signing import Signer
from trainguard.schemas.topics import INTERNAL_RECORDS, NODE_TOPICS, TOPIC_RECORDS, Topics, key_for, tag_of
from trainguard.streams.worker.event_buffer import EventBuffer
from trainguard.streams.worker.skew import ClockSkewEstimator, skew_anomaly
from trainguard.streams.worker.watermark import EventClock

# The record classes each topic may carry: a set lookup of the class per record (the hot path), not its tag.
_ALLOWED = {topic: frozenset(cls for cls in RECORD_TYPES if record_tag(cls) in tags)
            for topic, tags in {**TOPIC_RECORDS, **INTERNAL_RECORDS}.items()}


@dataclass
class Routing:
    """Where this processor sits among the worker's tasks, for repartitioning jobless node records.

    `job_of` is the fleet-wide node->job table (every worker reads the
    compacted `node-jobs` topic); `task_of(job)` is the partition a job's
    key hashes to. A jobless node record whose node runs a job of another
    task is forwarded, unchanged, to `node-events` keyed by that job.
    """

    task: int
    job_of: Callable[[str], str]
    task_of: Callable[[str], int]
    _homes: dict[str, int] = field(default_factory=dict)  # job -> its task (murmur2 is slow in Python)

    def home(self, job: str) -> int:
        """The task a job's key hashes to (cached, bounded)."""
        task = self._homes.get(job)
        if task is None:
            if len(self._homes) >= 100_000:
                self._homes.clear()
            task = self._homes[job] = self.task_of(job)
        return task

# Dead letters keep at most this much of the original (base64 grows it by a
# third); the rest stays findable at (topic, partition, offset) with its digest.
DEAD_LETTER_KEEP_BYTES = 256 << 10


class Message(Protocol):
    """A consumed Kafka message, as aiokafka's ConsumerRecord has it (timestamp in ms)."""

    @property
    def topic(self) -> str: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...


@dataclass(frozen=True)
class RawMessage:
    """One consumed Kafka message built by hand (tests, tools); timestamp in ms like Kafka's."""

    topic: str
    value: bytes | None
    key: bytes | None = None
    partition: int = -1
    offset: int = -1
    timestamp: int = 0


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
    rerouted: int = 0  # records whose job hashes to another task, sent on to it (a producer keyed them wrongly)


class MessageProcessor:
    """Decode, validate, detect; produce anomalies, incidents, dead letters."""

    def __init__(self, pipeline: DetectionPipeline, topics: Topics, codec: Codec | None = None, *,
                 stats: ProcessorStats | None = None, routing: Routing | None = None,
                 signer: Signer | None = None, skew: ClockSkewEstimator | None = None) -> None:
        self.pipeline = pipeline
        self.skew = skew  # each host's clock offset against the message timestamps; None: not estimated
        self.signer = signer  # signs incidents where Kafka ACLs cannot keep others from writing them
        self.topics = topics
        self.codec = codec or Codec()
        self.stats = stats or ProcessorStats()
        self.routing = routing
        self._logical: dict[str, str] = {}  # physical -> logical topic name, cached (hot path)
        self.buffer = EventBuffer()  # accepted, newer than the watermark
        self._node_events = topics.name("node-events")
        self._node_jobs = topics.name("node-jobs")

    def process_fetch(self, fetched: Mapping[Hashable, Sequence[Message]], clock: EventClock[Any]) -> list[OutMessage]:
        """Handle one fetch of several partitions under the guarded event clock."""
        out: list[OutMessage] = []
        stats = self.stats
        batch: list[tuple[float, Record]] = []  # accepted in this fetch, in arrival order
        accepted = batch.append
        for tp, messages in fetched.items():
            if not messages:
                continue
            logical = self._logical_of(messages[0].topic)
            stats.processed += len(messages)
            stats.by_topic[logical] = stats.by_topic.get(logical, 0) + len(messages)
            clock.touch(tp)
            self._admit_all(tp, messages, logical, clock, accepted, out)
        pipeline = self.pipeline
        self.buffer.add(batch)
        out.extend(self._release(clock.watermark()))
        if pipeline.nodes.changes:
            out.extend(OutMessage(self._node_jobs, node.encode(), job.encode()) for node, job in pipeline.nodes.drain())
        return out

    def _admit_all(self, tp: Hashable, messages: Sequence[Message], logical: str, clock: EventClock[Any],
                   accepted: Callable[[tuple[float, Record]], None], out: list[OutMessage]) -> None:
        """One partition's messages: decoded, routed to their job's task, their hosts' clocks noted, and
        judged by the event clock; what is accepted goes to `accepted` in arrival order.

        Every record of the worker passes through this loop, so what it reads per record is bound to a
        local first, and a job's task is looked up once per run of records of the same job.

        A host's clock is judged before the event clock, so a host a day ahead is seen even though its
        records are held and dead-lettered. Its finding goes straight out: it is about a host's clock, not a
        fault the pipeline's correlator could turn into an incident.
        """
        admit, routing, skew = clock.admit, self.routing, self.skew
        forwards = routing is not None and logical in NODE_TOPICS
        rekeys = logical == "node-events"
        last_job, at_home = "", True
        for message, record in zip(messages, self._decode_all(messages, logical, out)):
            if record is None:
                continue  # dead-lettered, its reason in `out`
            if forwards and not record.job and self._forward(record, message, out):  # type: ignore[attr-defined]
                continue
            job = getattr(record, "job", "")
            if job and routing is not None:
                if job != last_job:
                    last_job, at_home = job, routing.home(job) == routing.task
                if not at_home:
                    out.append(self._misrouted(message, logical, job))
                    continue
            if rekeys and not record.job:  # type: ignore[attr-defined]
                record = msgspec.structs.replace(record, job=(message.key or b"").decode())  # type: ignore[call-arg]
            ts, message_ts, node = record.ts, message.timestamp / 1000.0, getattr(record, "node", None) or None
            if skew is not None and message_ts > 0 and node:
                finding = skew.observe(node, ts, message_ts)
                if finding is not None:
                    out.extend(self._outputs([skew_anomaly(finding, getattr(record, "job", ""))], []))
            verdict = admit(tp, ts, message_ts, message, node)
            if verdict is None:
                accepted((ts, record))
                continue
            for held_ts, held in verdict.accept:  # released or confirmed: decode once more (rare)
                accepted((held_ts, record if held is message else self._redecode(held)))
            for held, reason in verdict.reject:
                out.append(self._dead_letter(held, reason))

    def _release(self, limit: float) -> list[OutMessage]:
        """Process the buffered records up to the watermark, in event-time order, then advance to it.

        A record newer than the watermark waits: another partition of the task
        may still deliver older evidence, and a job's silence (a hang) is only
        silence once every partition has passed it (Kafka Streams' partition
        group does the same).
        """
        out: list[OutMessage] = []
        pipeline = self.pipeline
        pipeline.time_limit = limit
        for anomalies, incidents in pipeline.process_all(self.buffer.release(limit)):
            out.extend(self._outputs(anomalies, incidents))
        if limit > pipeline.watermark and limit != float("inf"):
            out.extend(self.advance(limit))
        return out

    def _redecode(self, message: Message) -> Record:
        """A held message, accepted later: decoded again (it decoded fine when first seen)."""
        logical = self._logical_of(message.topic)
        record = self._decode(message, logical)
        if logical == "node-events" and not record.job:  # type: ignore[attr-defined]
            record = msgspec.structs.replace(record, job=(message.key or b"").decode())  # type: ignore[call-arg]
        return record

    def _forward(self, record: Record, message: Message, out: list[OutMessage]) -> bool:
        """Send a jobless node record to its job's task; False when it stays here."""
        routing = self.routing
        assert routing is not None
        job = routing.job_of(record.node)  # type: ignore[attr-defined]
        if not job or routing.task_of(job) == routing.task:
            return False
        out.append(OutMessage(self._node_events, job.encode(), message.value or b""))
        return True

    def _misrouted(self, message: Message, logical: str, job: str) -> OutMessage:
        """A record keyed to the wrong task: on to its job's task through `node-events`, once.

        Processed here it would feed a task that sees none of the job's other
        evidence (issue 21: a stale second hang in the wrong task, a missed
        slowdown in the right one). A record already re-keyed that still
        lands here (partition counts differ) is dead-lettered rather than
        sent round again.
        """
        routing = self.routing
        assert routing is not None
        if logical == "node-events":
            return self._dead_letter(message, f"misrouted: job {job!r} belongs to task {routing.home(job)}, "
                                              f"re-keyed once already and read by task {routing.task}")
        self.stats.rerouted += 1
        return OutMessage(self._node_events, job.encode(), message.value or b"")

    def advance_to(self, clock: EventClock[Any]) -> list[OutMessage]:
        """Move time to the clock's watermark when no message came (idle partitions, silence)."""
        return self._release(clock.watermark())

    def _logical_of(self, topic: str) -> str:
        logical = self._logical.get(topic)
        if logical is None:
            logical = self._logical[topic] = self.topics.logical(topic)
        return logical

    def advance(self, ts: float) -> list[OutMessage]:
        """Advance event time with no message (idle ticks)."""
        anomalies, incidents = self.pipeline.advance(ts)
        return self._outputs(anomalies, incidents)

    def _decode_all(self, messages: Sequence[Message], logical: str, out: list[OutMessage]) -> list[Record | None]:
        """Each message's record, in order; None where it was dead-lettered (its reason appended to `out`).

        One tight loop over the batch (`Codec.decode_all`) when every message
        is a plain record of this topic; otherwise message by message, so a
        bad one is named exactly and the others are kept.
        """
        records: list[Record | None] | None = self.codec.decode_all([m.value for m in messages])
        allowed = _ALLOWED.get(logical)
        if records is not None and (allowed is None or {r.__class__ for r in records} <= allowed):  # type: ignore[union-attr]
            return records
        records = []
        for message in messages:
            try:
                records.append(self._decode(message, logical))
            except DecodeError as exc:
                out.append(self._dead_letter(message, str(exc)))
                records.append(None)
        return records

    def _decode(self, message: Message, logical: str) -> Record:
        if message.value is None:
            raise DecodeError("empty message (tombstone)")
        record: Record = self.codec.decode(message.value)
        allowed = _ALLOWED.get(logical)
        if allowed is not None and record.__class__ not in allowed:
            raise DecodeError(f"record type {tag_of(record)!r} does not belong on topic {logical!r}", "type")
        return record

    def _dead_letter(self, message: Message, reason: str) -> OutMessage:
        """A dead letter that always fits a Kafka message: big originals are cut, with digest and size."""
        self.stats.dead_lettered += 1
        value = message.value or b""
        kept = value[:DEAD_LETTER_KEEP_BYTES]
        letter = DeadLetter(
            ts=message.timestamp / 1000.0,
            source_topic=message.topic,
            reason=reason,
            original_b64=base64.b64encode(kept).decode(),
            partition=message.partition,
            offset=message.offset,
            key_b64=base64.b64encode((message.key or b"")[:1024]).decode(),
            original_size=len(value),
            truncated=len(kept) < len(value),
            sha256=hashlib.sha256(value).hexdigest(),
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
