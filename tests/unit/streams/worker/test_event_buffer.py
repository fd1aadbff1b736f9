"""The worker's event-time buffer (streams.worker.event_buffer) releases exactly what one heap did, in its order.

The reference is the buffer it replaced: a binary heap of (event time,
arrival number, record), popped while its head is at or before the limit.
Random batches (nearly sorted, shuffled, with equal times and late records)
alternate with releases at random limits, including -inf and +inf; a
snapshot's entries taken mid-way restore a buffer that goes on identically.
"""

from __future__ import annotations

import heapq
import random

import pytest

from trainguard.streams.worker.event_buffer import MAX_RUNS, EventBuffer


class HeapBuffer:
    """The reference: the single heap the processor used before."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, str]] = []
        self.seq = 0

    def add(self, batch: list[tuple[float, str]]) -> None:
        for ts, record in batch:
            self.seq += 1
            heapq.heappush(self.heap, (ts, self.seq, record))

    def release(self, limit: float) -> list[str]:
        out = []
        while self.heap and self.heap[0][0] <= limit:
            out.append(heapq.heappop(self.heap)[2])
        return out


def _batch(rng: random.Random, now: float, label: int) -> list[tuple[float, str]]:
    """A fetch's records: mostly in time order near `now`, some equal times, some late, some shuffled."""
    size = rng.choice([0, 1, 3, 50, 400])
    times = [round(now + rng.uniform(-2, 5), rng.choice([0, 1, 3])) for _ in range(size)]
    if rng.random() < 0.7:
        times.sort()
    return [(ts, f"{label}.{i}") for i, ts in enumerate(times)]


@pytest.mark.parametrize("seed", range(25))
def test_releases_match_the_heap_in_content_and_order(seed: int) -> None:
    rng = random.Random(seed)
    buffer, reference = EventBuffer(), HeapBuffer()
    now = 1_000.0
    for step in range(300):
        batch = _batch(rng, now, step)
        buffer.add(batch)
        reference.add(batch)
        if rng.random() < 0.6:
            limit = rng.choice([now - 1, now, now + 0.5, float("-inf"), now + rng.uniform(-3, 3)])
            assert buffer.release(limit) == reference.release(limit)
        assert len(buffer) == len(reference.heap)
        assert buffer.entries() == sorted(reference.heap)
        now += rng.uniform(0, 1.5)
    assert buffer.release(float("inf")) == reference.release(float("inf"))
    assert len(buffer) == 0 and buffer.entries() == []


@pytest.mark.parametrize("seed", range(10))
def test_a_buffer_restored_from_its_entries_goes_on_identically(seed: int) -> None:
    rng = random.Random(seed)
    buffer, reference = EventBuffer(), HeapBuffer()
    now = 0.0
    for step in range(200):
        if step == 100:  # a snapshot and a restore: the entries in release order, or an old heap array
            entries = buffer.entries() if seed % 2 else list(reference.heap)
            buffer = EventBuffer(entries)  # numbering goes on from the newest waiting entry, as before
            assert buffer.entries() == sorted(reference.heap)
        batch = _batch(rng, now, step)
        buffer.add(batch)
        reference.add(batch)
        limit = now + rng.uniform(-2, 1)
        assert buffer.release(limit) == reference.release(limit)
        now += 1.0


def test_many_unreleased_batches_are_merged_into_few_runs_in_the_same_order() -> None:
    buffer, reference = EventBuffer(), HeapBuffer()
    for i in range(MAX_RUNS * 3):  # nothing released: runs pile up and are merged
        batch = [(float(100 - i % 7), f"{i}.a"), (float(i % 5), f"{i}.b")]
        buffer.add(batch)
        reference.add(batch)
        assert len(buffer._runs) <= MAX_RUNS  # noqa: SLF001 - the bound is the point of the test
    assert buffer.entries()[0][0] == 0.0  # the earliest waiting time heads the merged runs
    assert buffer.release(50.0) == reference.release(50.0)
    assert buffer.release(float("inf")) == reference.release(float("inf"))
