"""The publisher's write-ahead log: a bounded, ordered SQLite (WAL) queue on disk.

Every record the publisher accepts is appended here *before* `publish()`
returns and deleted only once Kafka has acknowledged it, so neither a broker
outage nor a killed collector loses it. SQLite in WAL mode gives what a
hand-written segment format would have to re-invent: an append is one
B-tree insert at the right edge (O(log n), effectively O(1)), a committed
row survives the process being killed, and `sync="always"` adds an fsync
per append for surviving a power cut (its cost is in benchmarks/bench_hook.py).

When the spool would exceed its size bound, the oldest *low-value* records
(GPU/RDMA samples, heartbeats: the next one supersedes them) are dropped
first, through an index on (low_value, seq), so making room is O(log n) per
dropped row; only if none is left are the oldest other records dropped.
Both are counted, so a loss is reported rather than silent.

Rows handed to the broker are marked `sent` first (one UPDATE per batch): a
collector killed before the acknowledgement resends them on restart, and
`possible_duplicates` counts exactly those (at-least-once, with a bound).
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

LOW_VALUE_TAGS = frozenset({"gpu_sample", "rdma_sample", "heartbeat"})
SYNC_MODES = {"process": "NORMAL", "always": "FULL"}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spool (
  seq INTEGER PRIMARY KEY, topic TEXT NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL,
  low INTEGER NOT NULL, size INTEGER NOT NULL, sent INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS spool_low ON spool (low, seq);
CREATE TABLE IF NOT EXISTS refused (
  seq INTEGER PRIMARY KEY, topic TEXT NOT NULL, key BLOB NOT NULL, head BLOB NOT NULL,
  size INTEGER NOT NULL, sha256 TEXT NOT NULL, reason TEXT NOT NULL);
"""
# A record the broker refuses (too large, invalid) is moved aside: kept as a dead letter would keep
# it (its head, size and digest, with the reason), at most this many, the oldest forgotten first.
REFUSED_KEEP_ROWS = 1000
REFUSED_KEEP_BYTES = 64 << 10


@dataclass(frozen=True)
class Refused:
    """A record the broker refused, set aside so the ones after it keep flowing."""

    seq: int
    topic: str
    key: bytes
    head: bytes  # the first REFUSED_KEEP_BYTES of the value
    size: int
    sha256: str
    reason: str


@dataclass(frozen=True)
class Entry:
    """One spooled record: where it goes and its encoded bytes."""

    seq: int
    topic: str
    key: bytes
    value: bytes
    low_value: bool


class Spool:
    """Thread-safe durable FIFO of `Entry`s in `directory/spool.sqlite`, at most `max_bytes`.

    `sync`: "process" (a committed append survives the process being killed;
    the OS writes it out) or "always" (fsync per append: survives a power cut).
    """

    def __init__(self, directory: Path, *, max_bytes: int, sync: str = "process") -> None:
        if sync not in SYNC_MODES:
            raise ValueError(f"spool sync must be one of {sorted(SYNC_MODES)}, got {sync!r}")
        self.directory = directory
        self.max_bytes = max_bytes
        self.dropped_low = 0
        self.dropped_other = 0
        directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(directory / "spool.sqlite"), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={SYNC_MODES[sync]}")
        self._db.executescript(_SCHEMA)
        count, size, last, sent = self._db.execute(
            "SELECT COUNT(*), COALESCE(SUM(size), 0), COALESCE(MAX(seq), -1), COALESCE(SUM(sent), 0) FROM spool"
        ).fetchone()
        self._count, self._bytes, self._next_seq = int(count), int(size), int(last) + 1
        self.possible_duplicates = int(sent)  # handed to the broker by a previous run, never acknowledged
        self.refused = int(self._db.execute("SELECT COUNT(*) FROM refused").fetchone()[0])

    def __len__(self) -> int:
        return self._count

    @property
    def size_bytes(self) -> int:
        """Bytes currently held."""
        return self._bytes

    @property
    def next_seq(self) -> int:
        """The sequence number the next appended record will get."""
        return self._next_seq

    def oldest_seq(self) -> int | None:
        """The sequence number of the oldest entry held, None when empty."""
        with self._lock:
            row = self._db.execute("SELECT MIN(seq) FROM spool").fetchone()
        return None if row[0] is None else int(row[0])

    def append(self, topic: str, key: bytes, value: bytes, *, low_value: bool) -> int:
        """Persist one record (committed when this returns); returns its sequence number."""
        size = len(topic) + len(key) + len(value)
        with self._lock:
            seq = self._next_seq
            self._next_seq += 1
            if self._bytes + size > self.max_bytes:
                self._make_room(size)
            self._db.execute("INSERT INTO spool (seq, topic, key, value, low, size) VALUES (?,?,?,?,?,?)",
                             (seq, topic, key, value, int(low_value), size))
            self._count += 1
            self._bytes += size
        return seq

    def peek(self, limit: int) -> list[Entry]:
        """The oldest `limit` entries, in order, without removing them."""
        with self._lock:
            rows = self._db.execute("SELECT seq, topic, key, value, low FROM spool ORDER BY seq LIMIT ?",
                                    (limit,)).fetchall()
        return [Entry(seq=s, topic=t, key=bytes(k), value=bytes(v), low_value=bool(low)) for s, t, k, v, low in rows]

    def mark_sent(self, seqs: list[int]) -> None:
        """Note that these rows were handed to the broker (a restart may resend them)."""
        if seqs:
            with self._lock:
                self._db.execute("UPDATE spool SET sent=1 WHERE seq BETWEEN ? AND ?", (min(seqs), max(seqs)))

    def remove(self, seqs: list[int]) -> None:
        """Forget entries (they were delivered)."""
        if not seqs:
            return
        with self._lock:
            self._db.execute("BEGIN")
            found = self._db.execute(
                f"SELECT COUNT(*), COALESCE(SUM(size), 0) FROM spool WHERE seq IN ({','.join('?' * len(seqs))})",
                seqs).fetchone()
            self._db.executemany("DELETE FROM spool WHERE seq=?", [(s,) for s in seqs])
            self._db.execute("COMMIT")
            self._count -= int(found[0])
            self._bytes -= int(found[1])

    def refuse(self, entry: Entry, reason: str) -> None:
        """Move a record the broker refused out of the queue, with the reason (one transaction)."""
        head = entry.value[:REFUSED_KEEP_BYTES]
        with self._lock:
            self._db.execute("BEGIN")
            size = self._db.execute("SELECT size FROM spool WHERE seq=?", (entry.seq,)).fetchone()
            self._db.execute("DELETE FROM spool WHERE seq=?", (entry.seq,))
            self._db.execute("INSERT OR REPLACE INTO refused (seq, topic, key, head, size, sha256, reason) "
                             "VALUES (?,?,?,?,?,?,?)", (entry.seq, entry.topic, entry.key, head, len(entry.value),
                                                        hashlib.sha256(entry.value).hexdigest(), reason))
            self._db.execute("DELETE FROM refused WHERE seq NOT IN "
                             "(SELECT seq FROM refused ORDER BY seq DESC LIMIT ?)", (REFUSED_KEEP_ROWS,))
            self._db.execute("COMMIT")
            if size is not None:
                self._count -= 1
                self._bytes -= int(size[0])
            self.refused += 1

    def refused_entries(self) -> list[Refused]:
        """The refused records kept, oldest first (for operators and tests)."""
        with self._lock:
            rows = self._db.execute("SELECT seq, topic, key, head, size, sha256, reason FROM refused "
                                    "ORDER BY seq").fetchall()
        return [Refused(seq=r[0], topic=r[1], key=bytes(r[2]), head=bytes(r[3]), size=int(r[4]), sha256=r[5],
                        reason=r[6]) for r in rows]

    def close(self) -> None:
        """Close the database (what it holds stays for the next run)."""
        with self._lock:
            self._db.close()

    # ----------------------------------------------------------- internals

    def _make_room(self, incoming: int) -> None:
        """Drop the oldest low-value rows, then the oldest others, until `incoming` fits."""
        for low in (1, 0):
            while self._bytes + incoming > self.max_bytes:
                row = self._db.execute("SELECT seq, size FROM spool WHERE low=? ORDER BY seq LIMIT 1",
                                       (low,)).fetchone()
                if row is None:
                    break
                self._db.execute("DELETE FROM spool WHERE seq=?", (row[0],))
                self._count -= 1
                self._bytes -= int(row[1])
                if low:
                    self.dropped_low += 1
                else:
                    self.dropped_other += 1
