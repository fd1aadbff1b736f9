"""The on-disk spool: order, bound, eviction of low-value records first, recovery after restart."""

from __future__ import annotations

from pathlib import Path

from trainguard.collectors.spool import Spool


def test_fifo_order_and_remove(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=10_000)
    for i in range(5):
        spool.append("t", b"k\n\t", f"v{i}".encode(), low_value=False)
    entries = spool.peek(3)
    assert [e.value for e in entries] == [b"v0", b"v1", b"v2"] and entries[0].key == b"k\n\t"
    spool.remove([e.seq for e in entries])
    assert [e.value for e in spool.peek(10)] == [b"v3", b"v4"]


def test_full_spool_drops_oldest_low_value_first_and_counts(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=5 * 17)  # each entry counts 17 bytes: topic "t", key "k", 15-byte value
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
    second = Spool(tmp_path, max_bytes=10_000)
    assert [(e.topic, e.value, e.low_value) for e in second.peek(10)] == [
        ("topic-a", b"r0", False), ("topic-a", b"r1", True), ("topic-a", b"r2", False)]
    assert second.append("topic-a", b"job", b"r3", low_value=False) == 3


def test_rows_handed_to_the_broker_count_as_possible_duplicates_after_a_restart(tmp_path: Path) -> None:
    first = Spool(tmp_path, max_bytes=10_000)
    seqs = [first.append("t", b"k", f"r{i}".encode(), low_value=False) for i in range(4)]
    first.mark_sent(seqs[:2])  # sent, then the collector died before the acknowledgement
    second = Spool(tmp_path, max_bytes=10_000)
    assert second.possible_duplicates == 2 and len(second) == 4


def test_append_and_eviction_stay_cheap_when_full(tmp_path: Path) -> None:
    """Eviction is an indexed delete of the oldest row, not a scan: a full spool keeps taking records."""
    spool = Spool(tmp_path, max_bytes=2000 * 20)
    for i in range(6000):
        spool.append("t", b"k", b"x" * 18, low_value=i % 2 == 0)
    assert len(spool) == 2000 and spool.size_bytes <= spool.max_bytes
    assert spool.dropped_low == 3000 and spool.dropped_other == 1000
    assert all(not e.low_value for e in spool.peek(2000))  # low-value samples went first
