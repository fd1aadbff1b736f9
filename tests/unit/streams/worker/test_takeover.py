"""A takeover: the new owner of a task restores its snapshot and reads backlogs of different sizes.

Issue 21: the survivor of a SIGKILL restored each partition's "caught up"
and a monotonic wall time from the dead process (meaningless on another
host), set a restored partition with a backlog aside as idle, let the
task's time run past it, and raised a false job-wide hang. Here the dead
owner's clock and the new owner's clock disagree both ways, the three
partitions' backlogs differ (training 100 records, gpu 40, logs 1), and
every order of first fetches is tried: no hang, and the task's time never
passes a record that has not been fetched yet.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable

import pytest

from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.detectors.settings import DetectorSettings
from trainguard.schemas import Codec
from trainguard.schemas.records import GpuStats, LogEvent, NodeGpuSample, Record, TrainingStep
from trainguard.schemas.topics import Topics
from trainguard.streams.worker.event_buffer import EventBuffer
from trainguard.streams.worker.processor import MessageProcessor, OutMessage, RawMessage
from trainguard.streams.worker.snapshot import Snapshot, dump, load
from trainguard.streams.worker.watermark import EventClock

TOPICS = Topics("t.")
PARTS: tuple[str, ...] = ("training", "gpu", "logs")
CHUNK = 25  # records per fetch of one partition
T0 = 1_700_000_000.0


class Wall:
    """A process's monotonic clock, set by the test."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _stream(start: float, end: float) -> dict[str, list[Record]]:
    """A healthy job: a step every 2 s, a busy GPU sample every 5 s, one log line."""
    steps: list[Record] = [TrainingStep(ts=start + 2 * i, job="j", rank=0, node="n0", step=int((start - T0) / 2) + i,
                                        loss=2.0) for i in range(int((end - start) / 2))]
    gpus: list[Record] = [NodeGpuSample(ts=start + 5 * i + 0.5, node="n0", job="j", gpus=[GpuStats(index=0, util_pct=97)])
                          for i in range(int((end - start) / 5))]
    logs: list[Record] = [LogEvent(ts=start + 1.2, node="n0", level="INFO", source="python", message="ok", job="j")]
    return {"training": steps, "gpu": gpus, "logs": logs}


def _messages(records: dict[str, list[Record]], first_offset: int = 0) -> dict[Hashable, list[RawMessage]]:
    codec = Codec()
    return {(p, 0): [RawMessage(topic=TOPICS.name(p), value=codec.encode(r), key=b"j", partition=0,
                                offset=first_offset + i, timestamp=int(r.ts * 1000)) for i, r in enumerate(rs)]
            for p, rs in records.items()}


def _clock(wall: Wall) -> EventClock[object]:
    return EventClock(max_ahead_s=30.0, idle_after_s=5.0, confirm_within=20, clock=wall)


def _fetch(processor: MessageProcessor, clock: EventClock[object], wall: Wall, tp: Hashable,
           batch: list[RawMessage], caught_up: bool) -> list[OutMessage]:
    wall.now += 0.5
    out = processor.process_fetch({tp: batch}, clock)
    clock.observe_fetch(tp, caught_up=caught_up)
    clock.answered(True)
    return out


def _old_owner(wall: Wall) -> bytes:
    """The dead owner: read everything up to T0 + 200, caught up and quiet, then snapshotted."""
    pipeline = DetectionPipeline.from_settings(DetectorSettings())
    processor, clock = MessageProcessor(pipeline, TOPICS), _clock(wall)
    for tp, batch in _messages(_stream(T0, T0 + 200)).items():
        clock.assign(tp)
        assert not any(m.topic.endswith("anomalies") for m in _fetch(processor, clock, wall, tp, batch, True))
    wall.now += 30.0  # every partition caught up and idle in the dead process's clock
    processor.advance_to(clock)
    return dump(Snapshot(pipeline, dict(clock.parts), processor.buffer.entries()))


@pytest.mark.parametrize(("old_wall", "new_wall"), [(50.0, 9e6), (9e6, 50.0)], ids=["new-host-ahead", "new-host-behind"])
@pytest.mark.parametrize("order", list(itertools.permutations(PARTS)), ids="-".join)
def test_a_takeover_with_backlogs_raises_no_hang_in_any_order_of_first_fetches(
        old_wall: float, new_wall: float, order: tuple[str, ...]) -> None:
    snap = load(_old_owner(Wall(old_wall)))
    assert snap is not None
    wall = Wall(new_wall)
    clock = _clock(wall)
    for tp, part in snap.parts.items():
        clock.assign(tp, part)
        assert not part.known and not part.caught_up  # nothing of the dead process's fetches survives
    processor = MessageProcessor(snap.pipeline, TOPICS)
    processor.buffer = EventBuffer(snap.buffer)
    backlog = _messages(_stream(T0 + 200, T0 + 400), first_offset=1000)
    backlog[("logs", 0)] = backlog[("logs", 0)][:1]
    assert sorted(len(b) for b in backlog.values()) == [1, 40, 100]
    out: list[OutMessage] = []
    pending = {tp: list(batch) for tp, batch in backlog.items()}
    sequence = [(p, 0) for p in order] + [tp for _ in range(10) for tp in pending]
    for tp in sequence:
        batch, pending[tp] = pending[tp][:CHUNK], pending[tp][CHUNK:]
        out += _fetch(processor, clock, wall, tp, batch, caught_up=not pending[tp])
        out += processor.advance_to(clock)
        unread = [m.timestamp / 1000 for rest in pending.values() for m in rest[:1]]
        assert not unread or clock.watermark() <= min(unread), (tp, clock.watermark(), min(unread))
    assert not any(pending.values())
    assert [m.topic for m in out if m.topic in (TOPICS.name("anomalies"), TOPICS.name("incidents"))] == []
    assert processor.pipeline.watermark >= T0 + 390  # time did move on once every backlog was read


def test_the_snapshot_carries_no_process_clock_reading() -> None:
    blob = _old_owner(Wall(123456.0))
    snap = load(blob)
    assert snap is not None and snap.parts
    assert all(p.last_record_wall == float("-inf") and not p.known for p in snap.parts.values())
    assert all(p.watermark > T0 for p in snap.parts.values())  # the event-time facts do travel
