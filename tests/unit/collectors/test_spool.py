"""The on-disk spool: order, bound, eviction of low-value records first, recovery after restart."""

from __future__ import annotations

from pathlib import Path

from collectors.spool import Spool


def test_fifo_order_and_remove(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=10_000)
    for i in range(5):
        spool.append("t", b"k\n\t", f"v{i}".encode(), low_value=False)
    entries = spool.peek(3)
    assert [e.value for e in entries] == [b"v0", b"v1", b"v2"] and entries[0].key == b"k\n\t"
    spool.remove([e.seq for e in entries])
    assert [e.value for e in spool.peek(10)] == [b"v3", b"v4"]


def test_full_spool_drops_oldest_low_value_first_and_counts(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=5 * 20)  # each entry is 20 bytes: "t\t6b\n" + 15-byte value
    spool.append("t", b"k", b"HIGH-0-xxxxxxxx", low_value=False)
    for i in range(4):
        spool.append("t", b"k", f"low-{i}-xxxxxxxxx".encode(), low_value=True)
    spool.append("t", b"k", b"HIGH-1-xxxxxxxx", low_value=False)
    assert [e.value[:6] for e in spool.peek(10)] == [b"HIGH-0", b"low-1-", b"low-2-", b"low-3-", b"HIGH-1"]
    assert (spool.dropped_low, spool.dropped_other) == (1, 0)
    for i in range(4):
        spool.append("t", b"k", f"HIGH-{i + 2}-xxxxxxxx"[:15].encode(), low_value=False)
    assert (spool.dropped_low, spool.dropped_other) == (4, 1)  # low-value gone first, then the oldest
    assert [e.value[:6] for e in spool.peek(10)] == [b"HIGH-1", b"HIGH-2", b"HIGH-3", b"HIGH-4", b"HIGH-5"]
    assert spool.size_bytes <= spool.max_bytes and len(spool) == 5


def test_restart_recovers_entries_in_order_and_continues_numbering(tmp_path: Path) -> None:
    first = Spool(tmp_path, max_bytes=10_000)
    for i in range(3):
        first.append("topic-a", b"job", f"r{i}".encode(), low_value=i == 1)
    (tmp_path / ".99.tmp").write_bytes(b"half-written")  # a crash mid-write
    second = Spool(tmp_path, max_bytes=10_000)
    assert [(e.topic, e.value, e.low_value) for e in second.peek(10)] == [
        ("topic-a", b"r0", False), ("topic-a", b"r1", True), ("topic-a", b"r2", False)]
    assert second.append("topic-a", b"job", b"r3", low_value=False) == 3
    assert not (tmp_path / ".99.tmp").exists()
