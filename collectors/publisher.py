"""The one Kafka edge of the collectors: every record leaves a node through here.

`publish()` only puts the record on an in-memory queue, so a training step
pays microseconds, not a network round trip. Records are sent in batches at
most every `linger_s` (or at once on `flush`): kafka-python spends a few ms
of CPU per produce round trip, so batching is what keeps the hook's
overhead under 1% of a step (see benchmarks/bench_hook.py). A background sender thread
sends them in order through one kafka-python producer (batched,
gzip-compressed, acks=all). Whatever cannot be acknowledged goes to the
on-disk `Spool` (durable across restarts), and while anything is spooled,
new records queue up behind it there, so order is kept; spooled records
are deleted once acknowledged. While the broker is unreachable records
simply accumulate on disk; when it returns they go out in the order they
were taken. On `close()` anything undelivered is spooled for the next run.

Delivery is at-least-once: after a partial failure the whole unacknowledged
tail is resent, so a record may arrive twice but never out of order and
never not at all (unless the spool bound forced a counted drop).

A publisher given a `signer` (the node agent's) signs each message's exact
bytes when it is produced, so spooled records are signed too.
"""

from __future__ import annotations

import logging
import queue
import threading
from pathlib import Path
from typing import Any

from kafka import KafkaProducer
from kafka.errors import KafkaError

from collectors.spool import LOW_VALUE_TAGS, Entry, Spool
from schemas.codec import Codec
from schemas.records import Record
from schemas.signing import Signer
from schemas.topics import Topics, key_for, tag_of

log = logging.getLogger(__name__)


class Publisher:
    """Asynchronous, spooling, ordered publisher of records to Kafka."""

    def __init__(self, *, servers: str, topics: Topics, spool_dir: Path, spool_max_bytes: int = 256 << 20,
                 batch_size: int = 500, linger_s: float = 0.2, send_timeout_s: float = 10.0,
                 retry_backoff_s: float = 1.0, compression: str = "gzip", client_id: str = "trainguard-collector",
                 signer: Signer | None = None, client_options: dict[str, Any] | None = None) -> None:
        self.servers = servers
        self.topics = topics
        self.spool = Spool(spool_dir, max_bytes=spool_max_bytes)
        self.sent = 0
        self.send_failures = 0
        self._batch_size = batch_size
        self._linger_s = linger_s
        self._send_timeout_s = send_timeout_s
        self._retry_backoff_s = retry_backoff_s
        self._producer_config: dict[str, Any] = dict(
            bootstrap_servers=servers, client_id=client_id, acks="all", compression_type=compression,
            linger_ms=5, max_in_flight_requests_per_connection=1,
            request_timeout_ms=int(send_timeout_s * 1000) // 2, max_block_ms=int(send_timeout_s * 1000) // 2,
            delivery_timeout_ms=int(send_timeout_s * 1000), retries=3,
            bootstrap_timeout_ms=int(send_timeout_s * 1000) // 2,  # default 30 s would stall close()
            **(client_options or {}),
        )
        self._signer = signer
        self._codec = Codec()
        self._queue: queue.SimpleQueue[Record | threading.Event | None] = queue.SimpleQueue()
        self._producer: KafkaProducer | None = None
        self._stopping = threading.Event()
        self._urgent = threading.Event()  # set by flush/close: skip the linger wait
        self._pending: list[Entry] = []  # taken off the queue, not yet sent nor spooled (sender thread only)
        self._markers: list[tuple[int, threading.Event]] = []  # (last seq before a flush, its event)
        self._thread = threading.Thread(target=self._run, name="trainguard-publisher", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------- API

    def publish(self, record: Record) -> None:
        """Queue one record for sending. Non-blocking and thread-safe."""
        self._queue.put(record)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until everything queued so far is delivered; False on timeout."""
        marker = threading.Event()
        self._queue.put(marker)
        self._urgent.set()
        return marker.wait(timeout_s)

    def close(self, timeout_s: float = 10.0) -> bool:
        """Deliver what can be delivered within `timeout_s`; the rest stays spooled.

        Returns True when nothing was left behind.
        """
        delivered = self.flush(timeout_s)
        self._stopping.set()
        self._urgent.set()
        self._queue.put(None)
        self._thread.join(timeout=self._send_timeout_s + 5)
        if self._thread.is_alive():
            log.error("publisher sender still busy after close; records not yet on disk may be lost")
        if self._producer is not None:
            self._producer.close(timeout=2)
        return delivered

    def stats(self) -> dict[str, int]:
        """Counters for metrics and logs."""
        return {"sent": self.sent, "spooled": len(self.spool), "spool_bytes": self.spool.size_bytes,
                "dropped_low_value": self.spool.dropped_low, "dropped_other": self.spool.dropped_other,
                "send_failures": self.send_failures}

    # ------------------------------------------------------ sender thread

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._drain(block=True)
            if (self._pending or len(self.spool)) and self._linger_s > 0:
                self._urgent.wait(self._linger_s)  # let a batch build up: one round trip for many records
                self._urgent.clear()
                self._drain(block=False)
            if self._pending and not len(self.spool):
                self._send_direct()
            self._spool_pending()
            while len(self.spool) and not self._stopping.is_set():
                if not self._send_spooled():
                    self.send_failures += 1
                    self._stopping.wait(self._retry_backoff_s)
                self._drain(block=False)
                self._spool_pending()
                self._release_markers()
            self._release_markers()
        self._drain(block=False)
        self._spool_pending()  # whatever was not delivered is at least on disk

    def _release_markers(self) -> None:
        """Wake flushers whose records have all been delivered."""
        oldest = self.spool.oldest_seq()
        still: list[tuple[int, threading.Event]] = []
        for last, event in self._markers:
            if oldest is None or oldest > last:
                event.set()
            else:
                still.append((last, event))
        self._markers = still

    def _drain(self, *, block: bool) -> None:
        """Move queued records to `_pending`, encoded (waiting up to 0.5 s for the first if `block`)."""
        try:
            item = self._queue.get(timeout=0.5) if block else self._queue.get_nowait()
        except queue.Empty:
            return
        while True:
            if isinstance(item, threading.Event):
                self._spool_pending()  # a flush waits for everything before it: track it by spool position
                self._markers.append((self.spool.next_seq - 1, item))
            elif item is not None:
                self._encode(item)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return

    def _encode(self, record: Record) -> None:
        try:
            value = self._codec.encode(record)
            topic, key = self.topics.for_record(record), key_for(record)
        except Exception:  # a record we cannot encode would block the queue forever
            log.exception("dropping unencodable record %r", type(record).__name__)
            return
        self._pending.append(Entry(seq=-1, topic=topic, key=key, value=value,
                                   low_value=tag_of(record) in LOW_VALUE_TAGS))

    def _spool_pending(self) -> None:
        for e in self._pending:
            self.spool.append(e.topic, e.key, e.value, low_value=e.low_value)
        self._pending = []

    def _send_direct(self) -> None:
        """The fast path while the broker is healthy and nothing waits on disk: skip the spool."""
        if self._produce(self._pending) == len(self._pending):
            self.sent += len(self._pending)
            self._pending = []
        # else: all of them are spooled next (a partial success is resent: at-least-once, in order)

    def _send_spooled(self) -> bool:
        entries = self.spool.peek(self._batch_size)
        delivered = self._produce(entries)
        self.spool.remove([e.seq for e in entries[:delivered]])
        self.sent += delivered
        return delivered == len(entries)

    def _produce(self, entries: list[Entry]) -> int:
        """Send in order and wait for the acks; returns how many, from the start, were acknowledged."""
        if not entries:
            return 0
        try:
            producer = self._ensure_producer()
            sign = self._signer.headers if self._signer else lambda value: None
            futures = [producer.send(e.topic, key=e.key, value=e.value, headers=sign(e.value)) for e in entries]
            producer.flush(timeout=self._send_timeout_s)
        except KafkaError as exc:
            log.warning("broker %s unreachable (%s); %d records spooled", self.servers, exc,
                        len(self.spool) + len(self._pending))
            return 0
        done = 0
        for future in futures:
            if not (future.is_done and future.succeeded()):
                log.warning("broker %s: %d of %d records unacknowledged; will resend", self.servers,
                            len(entries) - done, len(entries))
                break  # resend this one and everything after it, keeping order
            done += 1
        return done

    def _ensure_producer(self) -> KafkaProducer:
        if self._producer is None:
            self._producer = KafkaProducer(**self._producer_config)
        return self._producer
