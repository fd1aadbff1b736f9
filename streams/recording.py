"""Recordings: the JSON Lines file format, and recording/replaying it over Kafka.

One line per event: `{"topic", "key", "ts", "value"}`, where `topic` is the
logical topic name (training, gpu, ...), `key` the Kafka key as text,
`ts` the event time in seconds and `value` the record's own fields
including its `"type"` tag. msgspec decodes a whole line, value included,
in one validating pass, so reading is fast and a bad line is reported with
its line number instead of being silently dropped.

`replay` publishes a recording keeping the order per key (one producer,
keyed sends, one request in flight), optionally paced by event time.
`record` dumps topics back into a recording.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import msgspec

from trainguard.schemas.codec import RECORD_TYPES, AnyRecord, Codec, DecodeError, record_tag, wire
from trainguard.schemas.kafka_config import BrokerSettings
from trainguard.schemas.names import bad_name, may_hold_bad_names, problem
from trainguard.schemas.records import SCHEMA_VERSION, Record
from trainguard.schemas.topics import INPUT_TOPICS, TOPIC_OF_TAG, Topics, key_for, tag_of


class Event(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """One recording line."""

    topic: str
    key: str
    ts: float
    value: AnyRecord  # type: ignore[valid-type]


class RecordingError(ValueError):
    """A recording line is invalid; the message names the file and line."""

    def __init__(self, path: str, lineno: int, reason: str) -> None:
        super().__init__(f"{path}:{lineno}: {reason}")
        self.lineno = lineno
        self.reason = reason


_DECODER = msgspec.json.Decoder(Event)
_TOPIC_OF_TYPE: dict[type, str] = {cls: TOPIC_OF_TAG[record_tag(cls)] for cls in RECORD_TYPES}


def parse_line(line: bytes | str, path: str = "<recording>", lineno: int = 0) -> Event:
    """Decode and validate one line; raise `RecordingError` naming it.

    >>> ev = parse_line('{"topic":"training","key":"j","ts":1.0,"value":'
    ...                 '{"type":"heartbeat","ts":1.0,"job":"j","rank":0,"node":"n0"}}')
    >>> ev.topic, ev.value.rank
    ('training', 0)
    """
    try:
        event = _DECODER.decode(line)
    except msgspec.ValidationError as exc:
        raise RecordingError(path, lineno, f"invalid event: {exc}") from None
    except msgspec.DecodeError as exc:
        raise RecordingError(path, lineno, f"malformed JSON: {exc}") from None
    value: Record = event.value
    where = bad_name(value) if may_hold_bad_names(line) else None
    if where is not None:
        raise RecordingError(path, lineno, f"invalid event: {problem('value.' + where)}")
    if value.schema_version != SCHEMA_VERSION:
        raise RecordingError(path, lineno, f"unsupported schema_version {value.schema_version}")
    if _TOPIC_OF_TYPE[type(value)] != event.topic:
        raise RecordingError(path, lineno, f"a {tag_of(value)!r} record does not belong on topic {event.topic!r}")
    return event


def read_recording(path: Path | str, *, on_error: Callable[[RecordingError], None] | None = None,
                   progress: Callable[[int], None] | None = None) -> Iterator[Event]:
    """Yield the events of a recording in file order.

    A bad line raises `RecordingError`, unless `on_error` is given: then it is
    handed the error and reading goes on. Blank lines are ignored.
    `progress` gets the bytes read so far, every few thousand lines.

    The happy path is inlined (one msgspec call and two cheap checks per
    line); only a line that fails them goes through `parse_line` to build the
    error, so reading never dominates a backtest.
    """
    name = str(path)
    decode, topic_of, version = _DECODER.decode, _TOPIC_OF_TYPE, SCHEMA_VERSION
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if progress is not None and not lineno & 0xFFF:
                progress(f.tell())
            try:
                event = decode(line)
                value: Record = event.value
                if value.schema_version == version and topic_of[type(value)] == event.topic:
                    yield event
                    continue
            except msgspec.MsgspecError:
                if not line.strip():
                    continue
            try:
                parse_line(line, name, lineno)
            except RecordingError as err:
                if on_error is None:
                    raise
                on_error(err)
        if progress is not None:
            progress(f.tell())


class RecordingWriter:
    """Appends records (or events) to a recording file, one line each."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._encoder = msgspec.json.Encoder()
        self.count = 0

    def write(self, record: Record, key: str | None = None) -> None:
        """Write one record under its own topic and key (or `key`)."""
        event = Event(topic=TOPIC_OF_TAG[tag_of(record)], key=key if key is not None else key_for(record).decode(),
                      ts=record.ts, value=wire(record))  # NaN metrics as the wire spells them
        self._out.write(self._encoder.encode(event) + b"\n")
        self.count += 1


def write_recording(path: Path | str, records: Iterable[Record]) -> int:
    """Write every record to `path`; return how many were written."""
    with open(path, "wb") as f:
        writer = RecordingWriter(f)
        for record in records:
            writer.write(record)
    return writer.count


# ------------------------------------------------------------------ Kafka edge


@dataclass
class ReplayStats:
    sent: int = 0
    skipped: int = 0


def replay(path: Path | str, *, broker: BrokerSettings | str, topics: Topics, speed: float | None = None,
           on_error: Callable[[RecordingError], None] | None = None,
           sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> ReplayStats:
    """Publish a recording to Kafka, keeping the order per key.

    `speed` None means as fast as possible; otherwise event-time gaps are
    replayed `speed` times faster than they happened. One in-flight request
    per connection keeps retries from reordering a key's messages. Without
    `on_error`, the whole file is validated first, so a bad line stops the
    replay before anything is sent rather than halfway through. Raises
    `DeliveryError` when the broker did not acknowledge every record.
    """
    from trainguard.streams import kafka_io

    codec = Codec()
    stats = ReplayStats()
    if on_error is None:
        for _ in read_recording(path):
            pass

    def skip(err: RecordingError) -> None:
        stats.skipped += 1
        if on_error is not None:
            on_error(err)
        else:
            raise err

    failures: list[BaseException] = []
    # retries until delivery_timeout_ms (120 s): a topic created a moment ago may not have its leader yet
    producer = kafka_io.producer(kafka_io.as_broker(broker), max_in_flight_requests_per_connection=1)
    try:
        first_ts: float | None = None
        wall0 = clock()
        for event in read_recording(path, on_error=skip):
            if speed is not None:
                first_ts = event.ts if first_ts is None else first_ts
                delay = wall0 + (event.ts - first_ts) / speed - clock()
                if delay > 0:
                    sleep(delay)
            future = producer.send(topics.name(event.topic), key=event.key.encode(), value=codec.encode(event.value))
            future.add_errback(failures.append)
            stats.sent += 1
        producer.flush()
    finally:
        producer.close()
    if failures:  # flush() returns even when sends failed: an unacknowledged record is not "sent"
        raise DeliveryError(len(failures), stats.sent, failures[0])
    return stats


class DeliveryError(RuntimeError):
    """Some records of a replay were not acknowledged by the broker (after the producer's retries)."""

    def __init__(self, failed: int, attempted: int, first: BaseException) -> None:
        super().__init__(f"{failed} of {attempted} records were not acknowledged by the broker (first: {first!r})")
        self.failed = failed


@dataclass
class RecordStats:
    written: int = 0
    rejected: int = 0


def record(out: Path | str, *, broker: BrokerSettings | str, topics: Topics, logical: Iterable[str] = INPUT_TOPICS,
           timeout_s: float | None = None, max_events: int | None = None, from_beginning: bool = True,
           clock: Callable[[], float] = time.monotonic) -> RecordStats:
    """Dump topics into a recording until `timeout_s` passes or `max_events` are written.

    Messages that do not decode are not lost: they go, base64-encoded with
    their topic, partition, offset and reason, to `<out>.rejected.jsonl`.
    Raises `LookupError` when none of the topics exists.
    """
    from kafka import TopicPartition

    from trainguard.streams import kafka_io

    codec, stats = Codec(), RecordStats()
    names = {topics.name(t): t for t in logical}
    settings = kafka_io.as_broker(broker)
    consumer = kafka_io.consumer(settings, consumer_timeout_ms=500)
    try:
        parts = [TopicPartition(n, p) for n in names for p in sorted(consumer.partitions_for_topic(n) or ())]
        if not parts:
            raise LookupError(f"none of the topics {', '.join(names)} exists on {settings.servers}")
        consumer.assign(parts)
        if from_beginning:
            consumer.seek_to_beginning(*parts)
        else:
            consumer.seek_to_end(*parts)
        deadline = None if timeout_s is None else clock() + timeout_s
        rejected_path = Path(f"{out}.rejected.jsonl")
        with open(out, "wb") as f:
            writer = RecordingWriter(f)
            while (deadline is None or clock() < deadline) and (max_events is None or writer.count < max_events):
                batch = consumer.poll(timeout_ms=200, max_records=500)
                for msgs in batch.values():
                    for msg in msgs:
                        if max_events is not None and writer.count >= max_events:
                            break
                        key = msg.key.decode("utf-8", "replace") if msg.key is not None else None
                        try:
                            writer.write(codec.decode(msg.value), key=key)
                        except DecodeError as exc:
                            stats.rejected += 1
                            _reject(rejected_path, msg, str(exc))
            stats.written = writer.count
    finally:
        consumer.close()
    return stats


def _reject(path: Path, msg: Any, reason: str) -> None:
    line = {"topic": msg.topic, "partition": msg.partition, "offset": msg.offset, "reason": reason,
            "value_b64": base64.b64encode(msg.value or b"").decode()}
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")
