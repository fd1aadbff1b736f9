"""The worker's Prometheus endpoint, scraped after real messages went through the broker.

A real `trainguard worker` process (Faust) consumes from the real local Kafka
broker; the test produces a known mix of records (one of them garbage, one
a NaN step) and scrapes the worker's HTTP endpoint until the counts settle.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kafka import KafkaProducer
from processes import free_port
from prometheus_client.parser import text_string_to_metric_families

from trainguard.schemas.codec import encode
from trainguard.schemas.records import GpuStats, Heartbeat, NodeGpuSample, TrainingStep
from trainguard.schemas.topics import Topics, key_for
from trainguard.streams.admin import ensure_topics

pytestmark = pytest.mark.broker

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape(port: int) -> Samples:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _get(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def worker(kafka: str, topic_prefix: str, tmp_path: Path) -> Iterator[tuple[int, Topics]]:
    """A real worker process with metrics on a free port (served by its Faust web server)."""
    port = free_port()
    config = {
        "broker": {"bootstrap": kafka},
        "topics": {"prefix": topic_prefix, "partitions": 2},
        "worker": {"app_id": f"w-{topic_prefix}", "state_dir": str(tmp_path / "worker")},
        "metrics": {"port": port, "lag_interval_s": 0.5},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=2, replication=1)
    log = (tmp_path / "worker.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainguard.cli", "-c", str(path), "worker"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        yield port, topics
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _produce(servers: str, topics: Topics) -> None:
    producer = KafkaProducer(bootstrap_servers=servers, acks="all")
    gpus = [GpuStats(index=i, util_pct=95.0) for i in range(8)]
    records = [Heartbeat(ts=100.0 + i, job="j1", rank=i % 4, node=f"n{i % 2}") for i in range(20)]
    records += [NodeGpuSample(ts=100.0 + i, node=f"n{i}", gpus=gpus) for i in range(5)]
    records.append(TrainingStep(ts=130.0, job="j1", rank=2, node="n1", step=7, loss="nan"))
    for record in records:
        producer.send(topics.for_record(record), key=key_for(record), value=encode(record))
    producer.send(topics.name("logs"), key=b"n0", value=b'{"type": "log", "ts": "not a number"}')
    producer.flush()
    producer.close()


def test_worker_metrics_count_real_messages(kafka: str, worker: tuple[int, Topics]) -> None:
    port, topics = worker
    _produce(kafka, topics)
    deadline = time.monotonic() + 120  # bounds the wait for Faust to start; not a speed assertion
    samples: Samples = {}
    while time.monotonic() < deadline:
        samples = _scrape(port)
        if _settled(samples):
            break
        time.sleep(0.5)
    assert _get(samples, "trainguard_worker_events_total", topic="training") == 21
    assert _get(samples, "trainguard_worker_events_total", topic="gpu") == 5
    assert _get(samples, "trainguard_worker_events_total", topic="logs") == 1
    assert _get(samples, "trainguard_worker_dead_letters_total") == 1
    assert _get(samples, "trainguard_worker_anomalies_total", kind="nan") == 1
    assert _get(samples, "trainguard_worker_incidents_total", kind="nan") == 1
    assert _get(samples, "trainguard_worker_anomalies_total", kind="hang") == 0
    assert _get(samples, "trainguard_worker_batch_seconds_count") >= 1
    # time reached the last record (130), then grew only by silence while the broker answered
    assert _get(samples, "trainguard_worker_watermark_seconds") >= 130.0
    lags = {k: v for k, v in samples.items() if k[0] == "trainguard_worker_consumer_lag"}
    assert lags and all(v == 0 for v in lags.values()), lags
    assert {dict(k[1])["topic"] for k in lags} >= {"training", "gpu", "logs"}
    # detector state is counted by the batch loop every lag interval (0.5 s here), never per scrape
    assert _get(samples, "trainguard_worker_detector_state_entries", detector="hang") > 0
    assert _get(samples, "trainguard_worker_detector_evictions_total", detector="hang") == 0
    # each commit snapshots the changed tasks: built-in detectors only, so without pickle's memo
    assert _get(samples, "trainguard_worker_snapshots_total", pickle="fast") >= 1
    assert _get(samples, "trainguard_worker_snapshots_total", pickle="memo") == 0
    assert _get(samples, "trainguard_worker_snapshot_cpu_seconds_count") >= 1
    assert _get(samples, "trainguard_worker_snapshot_bytes") > 0


def _settled(samples: Samples) -> bool:
    lags = {dict(k[1])["topic"]: v for k, v in samples.items() if k[0] == "trainguard_worker_consumer_lag"}
    events = sum(v for k, v in samples.items() if k[0] == "trainguard_worker_events_total")
    nan_reported = _get(samples, "trainguard_worker_incidents_total", kind="nan") >= 1  # after the NaN settles
    counted = _get(samples, "trainguard_worker_detector_state_entries", detector="hang") > 0
    snapshotted = _get(samples, "trainguard_worker_snapshots_total", pickle="fast") >= 1
    return events >= 27 and nan_reported and counted and snapshotted and set(lags) >= {"training", "gpu", "logs"} \
        and not any(lags.values())
