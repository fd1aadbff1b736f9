"""WorkerMetrics without a broker: stats read at scrape time, outputs counted by kind."""

from __future__ import annotations

import urllib.request

from schemas.codec import encode
from schemas.records import Anomaly, Incident
from schemas.topics import Topics
from streams.worker.metrics import WorkerMetrics, detector_state_sizes
from streams.worker.processor import OutMessage, ProcessorStats, RawMessage

TOPICS = Topics("x.")


def _anomaly(kind: str = "nan") -> OutMessage:
    a = Anomaly(ts=5.0, id="a1", kind=kind, detector="d", onset=5.0, job="j")  # type: ignore[arg-type]
    return OutMessage(TOPICS.name("anomalies"), b"j", encode(a))


def _incident(kind: str = "nan") -> OutMessage:
    i = Incident(ts=5.0, id="i1", kind=kind, job="j", onset=5.0, detected_at=5.0)  # type: ignore[arg-type]
    return OutMessage(TOPICS.name("incidents"), b"j", encode(i))


def test_stats_are_read_at_scrape_time() -> None:
    stats = ProcessorStats()
    m = WorkerMetrics(stats=stats, topics=TOPICS)
    assert m.value("trainguard_worker_events_total", topic="gpu") is None
    stats.by_topic["gpu"] = 7
    stats.dead_lettered = 2
    assert m.value("trainguard_worker_events_total", topic="gpu") == 7
    assert m.value("trainguard_worker_dead_letters_total") == 2


def test_outputs_are_counted_by_kind_and_dead_letters_ignored() -> None:
    m = WorkerMetrics(stats=ProcessorStats(), topics=TOPICS)
    m.count_outputs([_anomaly("nan"), _anomaly("hang"), _anomaly("nan"), _incident("hang"),
                     OutMessage(TOPICS.name("dead-letter"), b"", b"{}")])
    assert m.value("trainguard_worker_anomalies_total", kind="nan") == 2
    assert m.value("trainguard_worker_anomalies_total", kind="hang") == 1
    assert m.value("trainguard_worker_incidents_total", kind="hang") == 1
    assert m.value("trainguard_worker_incidents_total", kind="sdc") == 0  # pre-created, shows as zero


def test_lag_is_end_minus_position_per_partition_and_unknown_is_skipped() -> None:
    m = WorkerMetrics(stats=ProcessorStats(), topics=TOPICS)
    batch = [RawMessage(topic="x.gpu", value=b"", partition=0, offset=o) for o in range(10)]
    batch.append(RawMessage(topic="x.training", value=b"", partition=1, offset=41))
    m.observe_batch(batch, 0.002, watermark=123.0)
    ends = {("x.gpu", 0): 25, ("x.training", 1): None}
    m.refresh_lag(lambda t, p: ends[(t, p)])
    assert m.value("trainguard_worker_consumer_lag", topic="gpu", partition="0") == 15
    assert m.value("trainguard_worker_consumer_lag", topic="training", partition="1") is None
    assert m.value("trainguard_worker_batch_seconds_count") == 1
    assert m.value("trainguard_worker_watermark_seconds") == 123.0


def test_two_instances_do_not_share_a_registry() -> None:
    a, b = WorkerMetrics(stats=ProcessorStats()), WorkerMetrics(stats=ProcessorStats())
    a.count_outputs([_anomaly()])
    assert b.value("trainguard_worker_anomalies_total", kind="nan") == 0


def test_detector_state_sizes_and_http_endpoint() -> None:
    class Det:
        instance = "demo"

        def state_size(self) -> int:
            return 4

    m = WorkerMetrics(stats=ProcessorStats(by_topic={"logs": 1}), state_sizes=detector_state_sizes([Det()]))
    server = m.serve(0, "127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    finally:
        server.close()
    assert 'trainguard_worker_detector_state_entries{detector="demo"} 4.0' in text
    assert 'trainguard_worker_events_total{topic="logs"} 1.0' in text
