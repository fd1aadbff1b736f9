"""Event time that a host cannot steer (issue 21): confirmation needs another host; a property test.

A host whose clock is a day ahead sent several kinds of records; two of
them confirmed each other and the task's time jumped a day. Now only
another host (or the host alone, with nobody else speaking meanwhile)
confirms a record far ahead, and other hosts in the present reject it.
"""

from __future__ import annotations

from collections.abc import Hashable

from hypothesis import given, settings
from hypothesis import strategies as st

from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.schemas import Codec
from trainguard.schemas.records import Heartbeat, LogEvent, TrainingStep
from trainguard.schemas.topics import Topics
from trainguard.streams.worker.processor import MessageProcessor, RawMessage
from trainguard.streams.worker.watermark import EventClock

DAY = 86400.0


def _clock() -> EventClock[str]:
    return EventClock(max_ahead_s=30.0, idle_after_s=5.0, confirm_within=5, clock=lambda: 0.0)


def _admit(c: EventClock[str], tp: str, ts: float, payload: str, host: str):  # type: ignore[no-untyped-def]
    c.touch(tp)
    return c.admit(tp, ts, 0, payload, host)


def test_a_host_a_day_ahead_cannot_confirm_itself_and_is_rejected_by_the_others() -> None:
    c = _clock()
    for tp in ("training", "gpu", "logs"):
        _admit(c, tp, 1000.0, f"{tp}-0", "good")
    accepted, rejected = [], []
    for i in range(12):  # the bad host sends a step, a heartbeat, a log line ... each a day ahead
        verdict = _admit(c, ("training", "gpu", "logs")[i % 3], 1000.0 + DAY + i, f"bad-{i}", "bad")
        accepted += [p for _, p in verdict.accept] if verdict else []
        verdict = _admit(c, "gpu", 1001.0 + i, f"good-{i}", "good")  # the fleet goes on in the present
        accepted += [p for _, p in verdict.accept] if verdict else []
        rejected += [p for p, _ in verdict.reject] if verdict else []
        assert c.watermark() < 1100.0  # time never jumps a day
    assert not any(p.startswith("bad") for p in accepted)
    assert {f"bad-{i}" for i in range(7)} <= set(rejected)  # each refuted after confirm_within present records


def test_another_host_confirms_a_real_jump_at_once() -> None:
    c = _clock()
    _admit(c, "training", 1000.0, "a0", "a")
    assert _admit(c, "training", 2000.0, "a1", "a").accept == []  # held
    verdict = _admit(c, "gpu", 2001.0, "b1", "b")
    assert [p for _, p in verdict.accept] == ["a1", "b1"]


def test_a_lone_host_resuming_after_a_long_pause_confirms_itself_when_nobody_else_speaks() -> None:
    c = _clock()
    _admit(c, "training", 1000.0, "a0", "a")
    out: list[str] = []
    for i in range(7):
        verdict = _admit(c, "training", 5000.0 + i, f"a{i + 1}", "a")
        out += [p for _, p in verdict.accept] if verdict else []
    assert out[:6] == [f"a{i}" for i in range(1, 7)] and c.watermark() >= 5005.0


# ------------------------------------------------------------------ property

TOPICS = Topics("p.")
_PARTS = ("training", "gpu", "logs")


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[tuple[Hashable, list[RawMessage]]], dict[Hashable, int]]:
    """Hosts with skewed clocks (one maybe a day ahead), records over partitions, fetched in a random interleaving."""
    hosts = draw(st.integers(2, 4))
    skew = [draw(st.sampled_from([0.0, 0.0, 5.0, -3600.0, DAY])) for _ in range(hosts)]
    codec, per_part = Codec(), {(p, 0): [] for p in _PARTS}  # type: dict[Hashable, list[RawMessage]]
    t = 1.7e9
    for i in range(draw(st.integers(5, 60))):
        t += draw(st.floats(0.0, 20.0))
        host = draw(st.integers(0, hosts - 1))
        part = draw(st.sampled_from(_PARTS))
        ts = t + skew[host]
        record = {"training": TrainingStep(ts=ts, job="j", rank=host, node=f"h{host}", step=i, loss=1.0),
                  "gpu": Heartbeat(ts=ts, job="j", rank=host, node=f"h{host}"),
                  "logs": LogEvent(ts=ts, node=f"h{host}", level="INFO", source="x", message=str(i), job="j")}[part]
        tp = (part, 0)
        per_part[tp].append(RawMessage(topic=TOPICS.name(part), value=codec.encode(record), key=b"j", partition=0,
                                       offset=len(per_part[tp]), timestamp=0))
    order = draw(st.permutations([tp for tp, ms in per_part.items() for _ in ms]))
    chunks: list[tuple[Hashable, list[RawMessage]]] = []
    taken = {tp: 0 for tp in per_part}
    for tp in order:  # one message per fetch, partitions interleaved at random (each in its own order)
        chunks.append((tp, [per_part[tp][taken[tp]]]))
        taken[tp] += 1
    return chunks, taken


@settings(max_examples=150, deadline=None)
@given(fleets())
def test_task_time_never_passes_a_record_not_yet_released(case: tuple[list[tuple[Hashable, list[RawMessage]]],
                                                                   dict[Hashable, int]]) -> None:
    chunks, _ = case
    pipeline = DetectionPipeline([])
    processor = MessageProcessor(pipeline, TOPICS)
    clock: EventClock[object] = EventClock(max_ahead_s=30.0, idle_after_s=5.0, confirm_within=5, clock=lambda: 0.0)
    for part in _PARTS:
        clock.assign((part, 0))  # assigned up front, as the worker's partitions are
    codec, before = Codec(), float("-inf")
    for tp, batch in chunks:
        processor.process_fetch({tp: batch}, clock)  # never marked caught up: no partition is set aside
        now = pipeline.watermark
        assert now >= before  # time never goes back
        before = now
        held = [codec.decode(h.payload.value).ts for p in clock.parts.values() for h in p.held]  # type: ignore[attr-defined]
        buffered = [ts for ts, _, _ in processor.buffer]
        assert all(now < ts for ts in held + buffered), (now, held, buffered)
        assert now <= min(p.watermark for p in clock.parts.values())  # no partition is passed by the task
