"""The one Kafka edge of the collectors: every record leaves a node through here.

Write-ahead: `publish()` encodes the record and appends it to the on-disk
`Spool` (SQLite, WAL) before it returns, so a record the caller handed over
survives the collector being killed, the broker being down, or both. The
cost is one SQLite insert on the caller's thread (tens of microseconds; with
`sync="always"` an fsync too; see benchmarks/bench_hook.py for both).

A background sender thread reads the spool in order and sends batches at
most every `linger_s` (or at once on `flush`): kafka-python spends a few ms
of CPU per produce round trip, so batching keeps the hook's overhead under
1% of a step. Rows are deleted once the broker acknowledged them. Nothing
waits in memory: the spool is the queue, bounded by `spool_max_bytes`, and
when full it drops the oldest low-value samples first, counted.

Delivery is at-least-once and in order: after a partial failure (or a kill
between send and acknowledgement) the unacknowledged tail is resent, so a
record may arrive twice but never out of order and never not at all (unless
the spool bound forced a counted drop). `stats()` counts resends.

A record the broker or the client refuses (too large, invalid: `REFUSALS`)
would fail the same way on every resend and hold everything behind it, so
it is set aside in the spool's `refused` table with the reason (its head,
size and digest, as a dead letter keeps them; collectors may not write the
dead-letter topic) and counted (`stats()["refused"]`); the producer that
saw the refusal is replaced. A broker refuses a whole batch, valid records
included, so after a refusal the next record is sent alone: refused alone,
it is the culprit; delivered, it was not.

A publisher given a `signer` (the node agent's) signs each message's exact
bytes when it is produced, so spooled records are signed too.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from kafka import KafkaProducer
from kafka.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
)

from trainguard.collectors.spool import LOW_VALUE_TAGS, Entry, Spool
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import Record
from trainguard.schemas.signing import Signer
from trainguard.schemas.topics import Topics, key_for, tag_of

log = logging.getLogger(__name__)

# What the broker (or the client, before sending) says about one record rather than about the link:
# resending it would fail the same way for ever and hold every record behind it.
REFUSALS: tuple[type[KafkaError], ...] = (MessageSizeTooLargeError, RecordListTooLargeError, InvalidRecordError,
                                          CorruptRecordError, InvalidTimestampError)


class Publisher:
    """Write-ahead, ordered publisher of records to Kafka."""

    def __init__(self, *, servers: str, topics: Topics, spool_dir: Path, spool_max_bytes: int = 256 << 20,
                 batch_size: int = 500, linger_s: float = 0.2, send_timeout_s: float = 10.0,
                 retry_backoff_s: float = 1.0, compression: str = "gzip", client_id: str = "trainguard-collector",
                 sync: str = "process", signer: Signer | None = None,
                 client_options: dict[str, Any] | None = None) -> None:
        self.servers = servers
        self.topics = topics
        self.spool = Spool(spool_dir, max_bytes=spool_max_bytes, sync=sync)
        self.sent = 0
        self.send_failures = 0
        self.resent = 0  # records sent again after an unacknowledged attempt (possible duplicates)
        self.unencodable = 0
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
        self._producer: KafkaProducer | None = None
        self._stopping = threading.Event()
        self._wake = threading.Event()  # a record was appended
        self._urgent = threading.Event()  # set by flush/close: skip the linger wait
        self._delivered = threading.Condition()  # notified whenever acknowledged rows leave the spool
        self._attempted = -1  # highest seq handed to the broker so far (sender thread only)
        self._isolate = False  # a refusal in the last batch: send the next record alone (sender thread only)
        self._thread = threading.Thread(target=self._run, name="trainguard-publisher", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------- API

    def publish(self, record: Record) -> None:
        """Make one record durable on local disk, then return; the sender delivers it. Thread-safe."""
        try:
            value = self._codec.encode(record)
            topic, key = self.topics.for_record(record), key_for(record)
        except Exception:  # a record we cannot encode is refused here, loudly, not queued
            self.unencodable += 1
            log.exception("dropping unencodable record %r", type(record).__name__)
            return
        self.spool.append(topic, key, value, low_value=tag_of(record) in LOW_VALUE_TAGS)
        self._wake.set()

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until everything published so far is delivered; False on timeout."""
        last = self.spool.next_seq - 1
        self._urgent.set()
        self._wake.set()
        with self._delivered:
            return self._delivered.wait_for(lambda: self._done_through(last), timeout=timeout_s)

    def close(self, timeout_s: float = 10.0) -> bool:
        """Deliver what can be delivered within `timeout_s`; the rest stays spooled for the next run.

        Returns True when nothing was left behind.
        """
        delivered = self.flush(timeout_s)
        self._stopping.set()
        self._wake.set()
        self._thread.join(timeout=self._send_timeout_s + 5)
        if self._producer is not None:
            self._producer.close(timeout=2)
        if not self._thread.is_alive():
            self.spool.close()
        return delivered

    def stats(self) -> dict[str, int]:
        """Counters for metrics and logs."""
        return {"sent": self.sent, "spooled": len(self.spool), "spool_bytes": self.spool.size_bytes,
                "dropped_low_value": self.spool.dropped_low, "dropped_other": self.spool.dropped_other,
                "send_failures": self.send_failures, "resent": self.resent + self.spool.possible_duplicates,
                "unencodable": self.unencodable, "refused": self.spool.refused}

    # ------------------------------------------------------ sender thread

    def _done_through(self, seq: int) -> bool:
        oldest = self.spool.oldest_seq()
        return oldest is None or oldest > seq

    def _run(self) -> None:
        while not self._stopping.is_set():
            if not len(self.spool):
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            if len(self.spool) < self._batch_size and self._linger_s > 0 and not self._urgent.is_set():
                self._urgent.wait(self._linger_s)  # let a batch build up: one round trip for many records
            self._urgent.clear()
            while len(self.spool) and not self._stopping.is_set():
                if not self._send_batch():
                    self.send_failures += 1
                    self._stopping.wait(self._retry_backoff_s)
                    break

    def _send_batch(self) -> bool:
        """Send the oldest batch; True when all of it left the spool (delivered or refused)."""
        entries = self.spool.peek(1 if self._isolate else self._batch_size)
        if not entries:
            return True
        self.resent += sum(1 for e in entries if e.seq <= self._attempted)
        self.spool.mark_sent([e.seq for e in entries])
        self._attempted = max(self._attempted, entries[-1].seq)
        delivered, refusal = self._produce(entries)
        self.spool.remove([e.seq for e in entries[:delivered]])
        self.sent += delivered
        self._isolate = False
        if refusal and len(entries) == 1:  # refused alone: the record itself is at fault, set it aside
            log.error("broker %s refused a record for %s (%s); set aside, the rest keep flowing",
                      self.servers, entries[0].topic, refusal)
            self.spool.refuse(entries[0], refusal)
            delivered = 1
        elif refusal:  # a refused batch fails every record in it: find the culprit by sending alone
            self._isolate = True
        with self._delivered:
            self._delivered.notify_all()
        return delivered == len(entries) or bool(refusal)

    def _produce(self, entries: list[Entry]) -> tuple[int, str]:
        """Send in order and wait for the acks.

        Returns how many, from the start, were acknowledged, and why the next
        was refused ("" when it was not refused, only unacknowledged: the
        link, not the record, so it is resent). A refusal replaces the
        producer: kafka-python 3.0.12 was seen failing later sends silently
        after one record was refused as too large.
        """
        refusal = ""
        try:
            producer = self._ensure_producer()
            sign = self._signer.headers if self._signer else lambda value: None
            futures = []
            for e in entries:
                try:
                    futures.append(producer.send(e.topic, key=e.key, value=e.value, headers=sign(e.value)))
                except REFUSALS as exc:  # refused by the client before sending (over max_request_size)
                    refusal = f"{type(exc).__name__}: {exc}"
                    break
            producer.flush(timeout=self._send_timeout_s)
        except KafkaError as exc:
            log.warning("broker %s unreachable (%s); %d records spooled", self.servers, exc, len(self.spool))
            return 0, ""
        done = 0
        for future in futures:
            if not (future.is_done and future.succeeded()):
                if future.is_done and isinstance(future.exception, REFUSALS):
                    refusal = f"{type(future.exception).__name__}: {future.exception}"
                else:
                    refusal = ""
                    log.warning("broker %s: %d of %d records unacknowledged; will resend", self.servers,
                                len(entries) - done, len(entries))
                break  # resend this one and everything after it, keeping order
            done += 1
        if refusal:
            self._reset_producer()
        return done, refusal

    def _reset_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.close(timeout=2)
            except KafkaError:
                log.warning("closing the producer after a refusal failed; a new one takes over")

    def _ensure_producer(self) -> KafkaProducer:
        if self._producer is None:
            self._producer = KafkaProducer(**self._producer_config)
        return self._producer
