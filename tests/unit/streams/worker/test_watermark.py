"""Guarded per-partition event time: min across partitions, future-dated records, no wall-clock time while unsafe."""

from __future__ import annotations

from trainguard.streams.worker.watermark import EventClock

NOW = [0.0]


class Clock(EventClock[str]):
    """The clock as the processor drives it: `touch` before each record."""

    def admit(self, tp, ts, broker_ts, payload):  # type: ignore[no-untyped-def, override]
        self.touch(tp)
        return super().admit(tp, ts, broker_ts, payload)


def clock(**kw: float) -> EventClock[str]:
    NOW[0] = 0.0
    return Clock(max_ahead_s=30.0, idle_after_s=5.0, confirm_within=3, stale_after_s=3.0,
                 clock=lambda: NOW[0], **kw)  # type: ignore[arg-type]


def test_time_is_the_minimum_over_partitions_until_one_is_idle() -> None:
    c = clock()
    c.admit("a", 100.0, 0, "a1")
    c.admit("b", 120.0, 0, "b1")
    assert c.watermark() == 100.0  # b's lead never moves time past what a has reached
    c.observe_fetch("a", caught_up=True)
    NOW[0] = 6.0
    assert c.watermark() == 120.0  # a is caught up and quiet: set aside


def test_a_lagging_partition_is_never_set_aside() -> None:
    c = clock()
    c.admit("a", 100.0, 0, "a1")
    c.admit("b", 120.0, 0, "b1")
    c.observe_fetch("a", caught_up=False)
    NOW[0] = 60.0
    assert c.watermark() == 100.0


def test_a_record_far_ahead_is_held_then_dead_lettered_without_moving_time() -> None:
    c = clock()
    c.admit("a", 100.0, 0, "ok")
    assert c.admit("a", 100.0 + 86400, 0, "forged").accept == []
    assert c.watermark() == 100.0
    rejected = []
    for i in range(3):
        rejected += c.admit("a", 101.0 + i, 0, f"later{i}").reject
    assert [p for p, _ in rejected] == ["forged"] and "future-dated" in rejected[0][1]
    assert c.watermark() == 103.0


def test_a_job_resuming_after_a_long_pause_is_confirmed_by_its_next_record() -> None:
    c = clock()
    c.admit("a", 100.0, 0, "before")
    assert c.admit("a", 1000.0, 0, "resume1").accept == []
    verdict = c.admit("a", 1001.0, 0, "resume2")
    assert [p for _, p in verdict.accept] == ["resume1", "resume2"] and c.watermark() == 1001.0


def test_a_record_ahead_of_its_broker_timestamp_is_rejected_at_once() -> None:
    c = clock()
    verdict = c.admit("a", 5000.0, 1000.0, "x")
    assert verdict.accept == [] and "broker timestamp" in verdict.reject[0][1]


def test_silence_advances_time_only_while_caught_up_and_the_broker_answers() -> None:
    c = clock()
    c.admit("a", 100.0, 0, "a1")
    c.observe_fetch("a", caught_up=True)
    c.answered(True)
    NOW[0] = 10.0
    c.answered(True)
    assert c.watermark() == 110.0
    c.answered(False)  # outage: the broker stops answering
    NOW[0] = 70.0
    assert c.watermark() == 100.0
    c.answered(True)  # back: silence is counted again only from now
    NOW[0] = 72.0
    c.answered(True)
    assert c.watermark() == 100.0
    NOW[0] = 76.0
    c.answered(True)
    assert c.watermark() == 106.0


def test_a_sparse_partition_is_judged_by_its_dense_neighbours() -> None:
    c = clock()
    c.admit("logs", 100.0, 0, "log1")
    for t in range(101, 700, 10):
        c.admit("training", float(t), 0, f"step{t}")
    assert c.admit("logs", 695.0, 0, "log2") is None  # 595 s after the previous log line: accepted as it is
