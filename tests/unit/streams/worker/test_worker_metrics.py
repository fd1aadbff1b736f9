"""WorkerMetrics without a broker: stats read at scrape time, outputs counted by kind, state counted when due."""

from __future__ import annotations

import urllib.request

from prometheus_client import CollectorRegistry, generate_latest

from trainguard.detectors.base import Detector
from trainguard.detectors.common import Bounded
from trainguard.detectors.dispatch import on
from trainguard.detectors.hang import HangDetector
from trainguard.detectors.nan import NanDetector
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.schemas.codec import encode
from trainguard.schemas.records import Anomaly, Incident, TrainingStep
from trainguard.schemas.topics import Topics
from trainguard.streams.worker.metrics import StateCensus, WorkerMetrics, detector_evictions, detector_state_sizes
from trainguard.streams.worker.processor import OutMessage, ProcessorStats, RawMessage

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
    m.observe_batch([RawMessage(topic="x.gpu", value=b"", partition=0, offset=o) for o in range(10)], 0.002, 120.0)
    m.observe_batch([RawMessage(topic="x.training", value=b"", partition=1, offset=41)], 0.002, watermark=123.0)
    m.observe_batch([], 0.001, watermark=123.0)  # an empty batch moves no partition
    ends = {("x.gpu", 0): 25, ("x.training", 1): None}
    m.refresh_lag(lambda t, p: ends[(t, p)])
    assert m.value("trainguard_worker_consumer_lag", topic="gpu", partition="0") == 15  # 25 - (9 + 1)
    assert m.value("trainguard_worker_consumer_lag", topic="training", partition="1") is None
    assert m.value("trainguard_worker_batch_seconds_count") == 3
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


class _Walked(Detector):
    """A detector that counts how often its state is walked (the thing a scrape must not do)."""

    def __init__(self, *, instance: str = "walked") -> None:
        super().__init__(instance=instance)
        self.keys: Bounded[int, int] = Bounded(2)
        self.walks = 0

    @on(TrainingStep)
    def _step(self, record: TrainingStep) -> None:
        self.keys[record.step] = record.rank

    def state_size(self) -> int:
        self.walks += 1
        return len(self.keys)


def _exposition(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample but the `_created` timestamps (those say when each registry was built)."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect() for s in family.samples if not s.name.endswith("_created")}


def test_the_census_exports_the_same_series_as_walking_the_state_per_scrape() -> None:
    pipeline = DetectionPipeline([NanDetector(), HangDetector(), _Walked()])
    for step in range(5):  # 5 keys into a map of 2: 3 evictions
        pipeline.process(TrainingStep(ts=100.0 + step, job="j", rank=0, node="n0", step=step, loss=2.0))
    stats = ProcessorStats(by_topic={"training": 5})
    walking = WorkerMetrics(stats=stats, topics=TOPICS, state_sizes=detector_state_sizes(pipeline.detectors),
                            evictions=detector_evictions(pipeline.detectors))
    census = StateCensus()
    counted = WorkerMetrics(stats=stats, topics=TOPICS, census=census)
    census.count(0, pipeline.detectors)
    assert _exposition(counted.registry) == _exposition(walking.registry)
    assert counted.value("trainguard_worker_detector_state_entries", detector="walked") == 2
    assert counted.value("trainguard_worker_detector_evictions_total", detector="walked") == 3
    assert counted.value("trainguard_worker_detector_state_entries", detector="hang") > 0  # type: ignore[operator]


def test_a_scrape_never_walks_detector_state_and_shows_it_as_of_the_last_count() -> None:
    det = _Walked()
    census = StateCensus()
    m = WorkerMetrics(stats=ProcessorStats(), topics=TOPICS, census=census)
    assert m.value("trainguard_worker_detector_state_entries", detector="walked") is None  # not counted yet
    census.count(3, [det])
    walks = det.walks
    det.keys[7] = 1  # state grows after the count: the gauge says so only at the next count
    for _ in range(20):
        m.value("trainguard_worker_detector_state_entries", detector="walked")
    assert det.walks == walks
    assert m.value("trainguard_worker_detector_state_entries", detector="walked") == 0
    census.count(3, [det])
    assert m.value("trainguard_worker_detector_state_entries", detector="walked") == 1


def test_the_census_sums_tasks_and_forgets_revoked_ones() -> None:
    census = StateCensus()
    a, b = _Walked(), _Walked()
    a.keys[1] = b.keys[1] = b.keys[2] = 0
    census.count(0, [a])
    census.count(1, [b])
    assert census.sizes() == {"walked": 3}
    census.retain([0])
    assert census.sizes() == {"walked": 1} and census.evictions() == {"walked": 0}


def test_the_fast_exposition_is_byte_for_byte_what_prometheus_client_writes() -> None:
    census = StateCensus()
    census.count(0, [NanDetector(instance='odd "name"\\with\nbreaks')])
    stats = ProcessorStats(by_topic={"gpu": 12, "training": 3}, dead_lettered=1)
    m = WorkerMetrics(stats=stats, topics=TOPICS, census=census)
    m.count_outputs([_anomaly("nan"), _incident("hang"), _anomaly("a-kind-of-its-own")])  # the codec knows no such kind
    for elapsed in (0.0004, 0.001, 0.003, 7.0):  # on a bound, between, past the last
        for p in (2, 0):
            m.observe_batch([RawMessage(topic="x.gpu", value=b"", partition=p, offset=9)], elapsed, 50.5)
    m.refresh_lag(lambda t, p: 100)
    body = m.render()
    assert body == generate_latest(m.registry)
    assert b'trainguard_worker_consumer_lag{partition="2",topic="gpu"} 90.0\n' in body
    assert b'trainguard_worker_batch_seconds_bucket{le="0.001"} 4.0\n' in body
    assert b'trainguard_worker_batch_seconds_bucket{le="+Inf"} 8.0\n' in body
    assert b'trainguard_worker_anomalies_total{kind="unknown"} 1.0\n' in body  # undecodable: counted anyway
    assert b'detector="odd \\"name\\"\\\\with\\nbreaks"' in body
    stats.by_topic["gpu"] = 13  # read now, not cached with the prefixes
    assert b'trainguard_worker_events_total{topic="gpu"} 13.0\n' in m.render()


def test_the_exported_families_keep_their_names_and_types() -> None:
    m = WorkerMetrics(stats=ProcessorStats(), topics=TOPICS, census=StateCensus())
    assert [(f.name, f.type) for f in m.registry.collect()] == [
        ("trainguard_worker_events", "counter"), ("trainguard_worker_dead_letters", "counter"),
        ("trainguard_worker_rerouted", "counter"),
        ("trainguard_worker_detector_state_entries", "gauge"), ("trainguard_worker_detector_evictions", "counter"),
        ("trainguard_worker_anomalies", "counter"), ("trainguard_worker_incidents", "counter"),
        ("trainguard_worker_batch_seconds", "histogram"), ("trainguard_worker_consumer_lag", "gauge"),
        ("trainguard_worker_watermark_seconds", "gauge"), ("trainguard_worker_waiting_records", "gauge"),
        ("trainguard_worker_paused_partitions", "gauge"), ("trainguard_worker_snapshot_cpu_seconds", "histogram"),
        ("trainguard_worker_snapshot_bytes", "gauge"), ("trainguard_worker_snapshots", "counter")]


def test_snapshots_are_measured_and_counted_by_pickle() -> None:
    """What a task snapshot costs, how big the last was, and how many needed pickle's memo (the slow path)."""
    m = WorkerMetrics(stats=ProcessorStats(), topics=TOPICS)
    m.observe_snapshot(0.004, 180_000, fast=True)
    m.observe_snapshot(0.3, 4_100_000, fast=False)
    assert m.value("trainguard_worker_snapshot_cpu_seconds_count") == 2
    assert m.value("trainguard_worker_snapshot_cpu_seconds_bucket", le="0.005") == 1
    assert m.value("trainguard_worker_snapshot_cpu_seconds_sum") == 0.304
    assert m.value("trainguard_worker_snapshot_bytes") == 4_100_000
    assert m.value("trainguard_worker_snapshots_total", pickle="fast") == 1
    assert m.value("trainguard_worker_snapshots_total", pickle="memo") == 1
    text = m.render().decode()
    assert 'trainguard_worker_snapshots_total{pickle="memo"} 1.0' in text
    assert "trainguard_worker_snapshot_cpu_seconds_bucket{le=\"0.25\"} 1.0" in text


def test_sample_values_are_written_as_prometheus_client_writes_them() -> None:
    from prometheus_client.utils import floatToGoString

    from trainguard.streams.worker.metrics import _number

    for value in (0.0, -0.0, 3.0, 0.1, 999_999.0, 999_999.9, 1e6, 1_234_567.0, 1.7961832766693e9, -5.5, -1e9,
                  float("inf"), float("-inf"), float("nan"), 1e-9):
        assert _number(value) == floatToGoString(value) + "\n", value
