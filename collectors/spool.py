"""A bounded, ordered, on-disk buffer of encoded records waiting for the broker.

Every record the publisher accepts is written here first and removed only
once Kafka has acknowledged it, so neither a broker outage nor a collector
restart loses it. One file per record, named by a sequence number, keeps the
format trivially crash-safe (write to a temp name, then rename) and makes
"send in order" a sorted directory listing.

When the spool would exceed its size bound, the oldest *low-value* records
(GPU/RDMA samples, heartbeats: the next one supersedes them) are dropped
first; only if none is left are the oldest other records dropped. Both are
counted, so the loss is reported rather than silent.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

LOW_VALUE_TAGS = frozenset({"gpu_sample", "rdma_sample", "heartbeat"})


@dataclass(frozen=True)
class Entry:
    """One spooled record: where it goes and its encoded bytes."""

    seq: int
    topic: str
    key: bytes
    value: bytes
    low_value: bool


class Spool:
    """Thread-safe FIFO of `Entry`s persisted under `directory`, at most `max_bytes`."""

    def __init__(self, directory: Path, *, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.dropped_low = 0
        self.dropped_other = 0
        self._lock = threading.Lock()
        self._index: dict[int, tuple[int, bool]] = {}  # seq -> (size, low_value), oldest first
        self._bytes = 0
        directory.mkdir(parents=True, exist_ok=True)
        self._recover()

    def __len__(self) -> int:
        with self._lock:
            return len(self._index)

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
            return next(iter(self._index), None)

    def append(self, topic: str, key: bytes, value: bytes, *, low_value: bool) -> int:
        """Persist one record; returns its sequence number. May evict older entries."""
        data = f"{topic}\t{key.hex()}\n".encode() + value
        with self._lock:
            seq = self._next_seq
            self._next_seq += 1
            self._make_room(len(data))
            tmp = self.directory / f".{seq}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, self._path(seq, low_value))
            self._index[seq] = (len(data), low_value)
            self._bytes += len(data)
        return seq

    def peek(self, limit: int) -> list[Entry]:
        """The oldest `limit` entries, in order, without removing them."""
        with self._lock:
            seqs = [(s, low) for s, (_, low) in zip(self._index, self._index.values())][:limit]
        out: list[Entry] = []
        for seq, low in seqs:
            try:
                raw = self._path(seq, low).read_bytes()
            except FileNotFoundError:
                continue  # evicted meanwhile
            header, _, value = raw.partition(b"\n")
            topic, _, key_hex = header.decode().partition("\t")
            out.append(Entry(seq=seq, topic=topic, key=bytes.fromhex(key_hex), value=value, low_value=low))
        return out

    def remove(self, seqs: list[int]) -> None:
        """Forget entries (they were delivered)."""
        with self._lock:
            for seq in seqs:
                self._forget(seq)

    # ----------------------------------------------------------- internals

    def _path(self, seq: int, low_value: bool) -> Path:
        return self.directory / f"{seq:020d}.{'l' if low_value else 'h'}"

    def _forget(self, seq: int) -> None:
        found = self._index.pop(seq, None)
        if found is None:
            return
        size, low = found
        self._bytes -= size
        self._path(seq, low).unlink(missing_ok=True)

    def _make_room(self, incoming: int) -> None:
        for low_only in (True, False):
            for seq in [s for s, (_, low) in self._index.items() if low or not low_only]:
                if self._bytes + incoming <= self.max_bytes:
                    return
                self._forget(seq)
                if low_only:
                    self.dropped_low += 1
                else:
                    self.dropped_other += 1

    def _recover(self) -> None:
        """Rebuild the index from files left by a previous run (a restart loses nothing)."""
        for tmp in self.directory.glob(".*.tmp"):
            tmp.unlink(missing_ok=True)  # a write that never completed was never acknowledged
        found: list[tuple[int, bool, int]] = []
        for path in self.directory.iterdir():
            stem, _, kind = path.name.partition(".")
            if stem.isdigit() and kind in ("l", "h"):
                found.append((int(stem), kind == "l", path.stat().st_size))
        for seq, low, size in sorted(found):
            self._index[seq] = (size, low)
            self._bytes += size
        self._next_seq = (found and max(s for s, _, _ in found) + 1) or 0
