"""Each host's clock offset estimated online (issue 21 item 2): a `clock_skew` finding past the bound.

The estimator compares each record's `ts` with its message timestamp, per
host, relative to the median over the hosts; these tests feed it hosts a
day ahead, an hour behind, jittery delivery, a recovery and a flood of
hosts, then drive the real `MessageProcessor` with messages carrying
broker timestamps.
"""

from __future__ import annotations

import pickle
import random
from collections import OrderedDict

import pytest

from trainguard.detectors.correlate import IncidentCorrelator
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.schemas import Codec
from trainguard.schemas.records import Anomaly, Heartbeat, LogEvent
from trainguard.schemas.topics import Topics
from trainguard.streams.worker import snapshot
from trainguard.streams.worker.processor import MessageProcessor, RawMessage
from trainguard.streams.worker.skew import ClockSkewEstimator, SkewFinding, skew_anomaly
from trainguard.streams.worker.tasks import NodeJobTable, Task, TaskFactory
from trainguard.streams.worker.watermark import EventClock

DAY, HOUR = 86400.0, 3600.0
T0 = 1.7e9


def _feed(est: ClockSkewEstimator, skews: dict[str, float], seconds: int, *, start: float = T0,
          delay: float = 0.5, rng: random.Random | None = None) -> list[SkewFinding]:
    """One record per host per second; its message stamped `delay` (or a random delay) after the true time."""
    found = []
    for s in range(seconds):
        t = start + s
        for node, skew in skews.items():
            d = rng.uniform(0.0, 20.0) if rng else delay
            finding = est.observe(node, t + skew, t + d)
            if finding is not None:
                found.append(finding)
    return found


GOOD = {"a": 0.0, "b": 0.2, "c": -0.3, "d": 1.0}


def test_a_host_a_day_ahead_is_flagged_once_with_its_offset() -> None:
    found = _feed(ClockSkewEstimator(bound_s=120.0), {**GOOD, "bad": DAY}, 600)
    assert [(f.node, f.state) for f in found] == [("bad", "skewed")]
    assert abs(found[0].offset_s - DAY) < 5.0 and found[0].hosts == 5


def test_a_host_an_hour_behind_is_flagged_with_a_negative_offset() -> None:
    found = _feed(ClockSkewEstimator(bound_s=120.0), {**GOOD, "late": -HOUR}, 600)
    assert [(f.node, f.state) for f in found] == [("late", "skewed")]
    assert abs(found[0].offset_s + HOUR) < 5.0


def test_jittery_delivery_and_a_late_flush_flag_no_host() -> None:
    est = ClockSkewEstimator(bound_s=120.0)
    rng = random.Random(7)
    assert _feed(est, {**GOOD, "e": 30.0}, 300, rng=rng) == []  # 0-20 s of network delay, a host 30 s off
    # a spool flushes five minutes of one host's records at once: a few very late messages, the median holds
    for i in range(5):
        assert est.observe("a", T0 + 300 + i, T0 + 900 + i) is None
    assert _feed(est, GOOD, 300, start=T0 + 900, rng=rng) == []
    assert abs(est.offset("e") or 0.0) < 60.0


def test_a_misclocked_broker_or_a_replay_moves_every_host_alike_and_flags_none() -> None:
    """Message timestamps a day late for every host (an old recording replayed now): the reference cancels it."""
    assert _feed(ClockSkewEstimator(bound_s=120.0), GOOD, 600, delay=DAY) == []


def test_a_host_that_recovers_is_reported_once_more_and_a_big_change_once() -> None:
    est = ClockSkewEstimator(bound_s=120.0)
    found = _feed(est, {**GOOD, "x": -HOUR}, 300)
    found += _feed(est, {**GOOD, "x": -3 * HOUR}, 300, start=T0 + 300)  # worse by two hours: changed
    found += _feed(est, {**GOOD, "x": 0.0}, 300, start=T0 + 600)  # NTP fixed it
    found += _feed(est, {**GOOD, "x": 0.0}, 300, start=T0 + 900)  # healthy: nothing more
    assert [(f.node, f.state) for f in found] == [("x", "skewed"), ("x", "changed"), ("x", "recovered")]
    assert abs(found[1].offset_s + 3 * HOUR) < 5.0 and abs(found[2].offset_s) < 5.0
    assert T0 + 600 <= found[2].onset <= found[2].at < T0 + 700


def test_one_or_two_hosts_cannot_tell_whose_clock_is_wrong_so_nothing_is_said() -> None:
    assert _feed(ClockSkewEstimator(bound_s=120.0), {"a": 0.0, "bad": DAY}, 600) == []


def test_records_without_message_timestamps_are_not_judged() -> None:
    est = ClockSkewEstimator(bound_s=120.0)
    for s in range(200):
        for node, skew in {**GOOD, "bad": DAY}.items():
            assert est.observe(node, T0 + s + skew, 0.0) is None
    assert len(est) == 0


def test_many_hosts_stay_within_the_bound_on_hosts_and_a_bad_one_is_still_found() -> None:
    """5,000 hosts that come and go (four times the bound) beside a steady few: memory stays bounded."""
    est = ClockSkewEstimator(bound_s=120.0, max_hosts=500)
    steady, found = {**GOOD, "bad": DAY}, []
    for s in range(100):
        t = T0 + s
        for node, skew in steady.items():
            found.append(est.observe(node, t + skew, t))
        for h in range(50 * s, 50 * s + 50):  # fifty new hosts a second, each heard a few times, then gone
            found.extend(est.observe(f"n{h}", t + h % 7, t) for _ in range(20))
        assert len(est) <= 500
    assert 500 - 500 // 64 < len(est) <= 500  # past the bound, the 1/64 heard least recently go at once
    assert [(f.node, f.state) for f in found if f is not None] == [("bad", "skewed")]


def test_the_anomaly_names_the_node_carries_the_offset_and_never_opens_an_incident() -> None:
    finding = SkewFinding(node="bad", state="skewed", offset_s=DAY, reference_s=0.5, onset=T0, at=T0 + 12, hosts=5)
    anomaly = skew_anomaly(finding, "j")
    assert (anomaly.kind, anomaly.nodes, anomaly.job, anomaly.evidence["offset_s"]) == ("clock_skew", ["bad"], "j", DAY)
    assert anomaly.id == skew_anomaly(finding, "j").id  # the same finding redelivered has the same id
    assert IncidentCorrelator().add(anomaly) == []
    assert IncidentCorrelator().add(Anomaly(ts=1.0, id="h", kind="hang", detector="hang", onset=1.0, job="j"))


# ------------------------------------------------------------------ through the processor

TOPICS = Topics("p.")


def _fetches(skews: dict[str, float], seconds: int, stamped: bool) -> list[dict[object, list[RawMessage]]]:
    """Heartbeats and log lines of each host, one fetch a second, messages stamped with the true time (ms)."""
    codec, offsets, out = Codec(), {"gpu": 0, "logs": 0}, []
    for s in range(seconds):
        t = T0 + s
        fetch: dict[object, list[RawMessage]] = {("gpu", 0): [], ("logs", 0): []}
        for rank, (node, skew) in enumerate(skews.items()):
            part = "gpu" if s % 2 else "logs"
            record = (Heartbeat(ts=t + skew, job="j", rank=rank, node=node, step=s) if part == "gpu" else
                      LogEvent(ts=t + skew, node=node, level="INFO", source="x", message="ok", job="j"))
            fetch[(part, 0)].append(RawMessage(TOPICS.name(part), codec.encode(record), b"j", 0, offsets[part],
                                               int((t + 0.2) * 1000) if stamped else 0))
            offsets[part] += 1
        out.append(fetch)
    return out


def _run(skews: dict[str, float], seconds: int, *, stamped: bool = True) -> list[Anomaly]:
    processor = MessageProcessor(DetectionPipeline([]), TOPICS, skew=ClockSkewEstimator(bound_s=120.0))
    clock: EventClock[object] = EventClock(max_ahead_s=30.0, idle_after_s=5.0, confirm_within=5, clock=lambda: 0.0)
    clock.assign(("gpu", 0))
    clock.assign(("logs", 0))
    codec, anomalies = Codec(), []
    for fetch in _fetches(skews, seconds, stamped):
        for out in processor.process_fetch(fetch, clock):
            if out.topic == TOPICS.name("anomalies"):
                anomalies.append(codec.decode(out.value))
            assert out.topic != TOPICS.name("incidents")
    return anomalies


def test_the_worker_emits_one_clock_skew_finding_for_a_host_a_day_ahead() -> None:
    found = _run({**GOOD, "bad": DAY}, 300)
    assert [(a.kind, a.nodes, a.evidence["state"]) for a in found] == [("clock_skew", ["bad"], "skewed")]
    assert abs(found[0].evidence["offset_s"] - DAY) < 5.0 and found[0].job == "j"
    assert found[0].ts < T0 + 300  # dated by message time, not by the host's clock


def test_the_worker_says_nothing_of_a_healthy_fleet_or_without_broker_timestamps() -> None:
    assert _run({**GOOD, "e": 20.0}, 300) == []
    assert _run({**GOOD, "bad": DAY}, 300, stamped=False) == []


def test_a_restored_task_keeps_its_verdicts_and_reports_no_host_twice() -> None:
    """The estimates travel in the task's snapshot (committed with the finding): a restore re-reports nothing."""
    factory = TaskFactory(topics=TOPICS, partitions=1, new_pipeline=lambda: DetectionPipeline([]),
                          new_clock=lambda: EventClock(max_ahead_s=30.0, idle_after_s=5.0, confirm_within=5,
                                                       clock=lambda: 0.0),
                          table=NodeJobTable(), new_skew=lambda: ClockSkewEstimator(bound_s=120.0))
    fetches = _fetches({**GOOD, "bad": DAY}, 400, stamped=True)
    codec = Codec()

    def skews(task: Task, part: list[dict[object, list[RawMessage]]]) -> list[str]:
        found = []
        for fetch in part:
            for out in task.processor.process_fetch(fetch, task.clock):
                if out.topic == TOPICS.name("anomalies"):
                    found.append(codec.decode(out.value).evidence["state"])
        return found

    task = factory.build(0)
    for tp in (("gpu", 0), ("logs", 0)):
        task.clock.assign(tp)
    assert skews(task, fetches[:200]) == ["skewed"]
    blob = snapshot.dump(snapshot.Snapshot(task.processor.pipeline, dict(task.clock.parts),
                                           task.processor.buffer.entries(), skew=task.processor.skew))
    restored = factory.build(0, snapshot.load(blob))
    assert restored.processor.skew is not None and abs((restored.processor.skew.offset("bad") or 0) - DAY) < 5
    assert skews(restored, fetches[200:]) == []  # still skewed, already said
    fresh = factory.build(0)  # what a restore without the estimates would do: say it again
    for tp in (("gpu", 0), ("logs", 0)):
        fresh.clock.assign(tp)
    assert skews(fresh, fetches[200:]) == ["skewed"]


def test_every_host_of_a_100k_gpu_job_is_estimated_and_a_bad_one_among_them_is_found() -> None:
    """12,500 hosts in one task (one 100,000-GPU job): a bound below that forgot each host before its next
    record, so nobody was ever estimated and every record paid for a new host (issue 23)."""
    est = ClockSkewEstimator(bound_s=120.0)
    hosts = {f"node-{n:05d}": 0.0 for n in range(12_499)} | {"bad": HOUR}
    found = _feed(est, hosts, 16 * 3)
    assert len(est) == 12_500
    assert est.offset("node-00000") is not None and est.offset("node-12498") is not None
    assert [(f.node, f.state) for f in found] == [("bad", "skewed")]


def test_past_the_bound_the_hosts_heard_longest_ago_go_whatever_order_they_came_in() -> None:
    """The first host, heard every second, outlives hosts that came after it and fell silent."""
    est = ClockSkewEstimator(bound_s=120.0, max_hosts=128)
    for s in range(10):
        est.observe("first", T0 + s, T0 + s)
        for h in range(40 * s, 40 * s + 40):
            est.observe(f"n{h}", T0 + s, T0 + s)
    assert "first" in est._hosts and "n0" not in est._hosts  # noqa: SLF001
    assert "n399" in est._hosts and len(est) <= 128  # noqa: SLF001 - the newest host is never the one forgotten


def test_hosts_packed_before_they_noted_when_they_were_heard_restore() -> None:
    est = ClockSkewEstimator(bound_s=120.0)
    _feed(est, {**GOOD, "bad": DAY}, 20)
    state = est.__getstate__()
    state["_hosts"] = [row[:-1] for row in state["_hosts"]]  # rows from before the `heard` field
    back = ClockSkewEstimator.__new__(ClockSkewEstimator)
    back.__setstate__(state)
    assert [back._hosts[n].heard for n in back._hosts] == [0.0] * len(back._hosts)  # noqa: SLF001
    assert back.offset("bad") == est.offset("bad")


def test_a_restored_estimator_takes_todays_bounds_not_its_snapshots() -> None:
    old = ClockSkewEstimator(bound_s=60.0, max_hosts=10_000)
    factory = TaskFactory(topics=Topics("t."), partitions=1, new_pipeline=lambda: DetectionPipeline([]),
                          new_clock=EventClock, table=NodeJobTable(), new_skew=ClockSkewEstimator)
    snap = snapshot.Snapshot(DetectionPipeline([]), {}, [], skew=old)
    restored = factory.build(0, snap).processor.skew
    assert restored is old and (restored.bound_s, restored.max_hosts) == (120.0, 100_000)


def test_estimates_pickled_as_rows_or_as_before_issue_23_restore_to_the_same_verdicts() -> None:
    """Hosts travel as one tuple each; a snapshot from before (the hosts' OrderedDict itself) still restores."""
    est = ClockSkewEstimator(bound_s=120.0)
    hosts = {**GOOD, "bad": DAY}
    assert [(f.node, f.state) for f in _feed(est, hosts, 60)] == [("bad", "skewed")]
    packed = pickle.loads(pickle.dumps(est))
    before = ClockSkewEstimator.__new__(ClockSkewEstimator)
    before.__setstate__(dict(vars(est), _hosts=OrderedDict(est._hosts)))  # noqa: SLF001 - as stored before issue 23
    for back in (packed, before):
        assert list(back._hosts) == list(est._hosts)  # noqa: SLF001 - first heard first, kept
        assert all(back.offset(n) == est.offset(n) for n in hosts)
        assert back._hosts["a"].deltas == est._hosts["a"].deltas  # noqa: SLF001 - the window, oldest first
        assert _feed(back, {**GOOD, "bad": 0.0}, 120, start=T0 + 60)[-1].state == "recovered"


def test_each_hosts_window_is_its_last_records_oldest_first_across_restores() -> None:
    """The window is a ring of doubles (issue 23): it holds what a deque of the last `window` values would,
    oldest first, through wrap-arounds, a snapshot taken at any point and a restore under a smaller window."""
    rng = random.Random(7)
    est = ClockSkewEstimator(window=5, every=3)
    reference: list[float] = []
    for i in range(23):
        ts = T0 + i + rng.uniform(-2.0, 2.0)
        est.observe("a", ts, T0 + i)
        reference.append(ts - (T0 + i))
        assert est._hosts["a"].deltas == reference[-5:]  # noqa: SLF001
        if i in (3, 4, 11):  # before it fills, as it fills, after it wrapped
            est = pickle.loads(pickle.dumps(est))
            assert est._hosts["a"].deltas == reference[-5:]  # noqa: SLF001
    state = est.__getstate__()
    smaller = ClockSkewEstimator.__new__(ClockSkewEstimator)
    smaller.__setstate__({**state, "window": 3})
    assert smaller._hosts["a"].deltas == reference[-3:]  # noqa: SLF001
    smaller.observe("a", T0 + 100.5, T0 + 100)
    assert smaller._hosts["a"].deltas == [*reference[-2:], 0.5]  # noqa: SLF001


def test_a_host_pickled_whole_before_issue_23_restores_with_its_window_and_verdict(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshots from before issue 23 hold each host whole: a dataclass with a deque, pickled by its dict.

    The old class is put back under the module's name while pickling, so the bytes are the old ones."""
    from collections import deque
    from dataclasses import dataclass

    from trainguard.streams.worker import skew

    @dataclass
    class _Host:
        deltas: deque[float]
        seen: int = 0
        estimate: float | None = None
        streak: int = 0
        streak_since: float = 0.0
        flagged: bool = False
        flagged_offset: float = 0.0
        heard: float = 0.0

    _Host.__module__, _Host.__qualname__ = skew.__name__, "_Host"
    with monkeypatch.context() as patched:
        patched.setattr(skew, "_Host", _Host)
        old = pickle.dumps(_Host(deque([1.0, 2.0, 3.0], maxlen=31), 48, 2.0, 1, 5.0, True, 7.0, 9.0))
    host = pickle.loads(old)
    assert type(host) is skew._Host and host.deltas == [1.0, 2.0, 3.0]  # noqa: SLF001
    assert (host.seen, host.estimate, host.streak, host.streak_since, host.flagged, host.flagged_offset,
            host.heard) == (48, 2.0, 1, 5.0, True, 7.0, 9.0)
