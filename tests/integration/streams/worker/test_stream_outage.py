"""A 60 s broker outage raises no incident: event time never advances from the wall clock while
the worker cannot reach its input.

Runs its own broker on free ports (the shared one is never stopped), a real
worker, and a healthy job publishing a step every second with event time =
wall time. The job is past its warm-up (400 s of history), so its hang
threshold is the 40 s floor: had the worker filled the outage from the wall
clock (as it once did), this outage would be a hang.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from processes import free_port

from trainguard.lab.localkafka.broker import LocalBroker
from trainguard.schemas import Codec
from trainguard.schemas.records import Heartbeat, Incident, TrainingStep
from trainguard.schemas.topics import Topics, key_for
from trainguard.settings import BrokerSettings
from trainguard.streams import kafka_io
from trainguard.streams.admin import ensure_topics

pytestmark = pytest.mark.broker
OUTAGE_S = 60


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalBroker]:
    settings = BrokerSettings(port=free_port(), controller_port=free_port(), data_dir=tmp_path / "kafka", heap_mb=256)
    broker = LocalBroker(settings, lib_dir=Path(".trainguard/kafka-lib").resolve())
    broker.start()
    yield broker
    broker.stop()


def _records(step: int, ts: float) -> list[TrainingStep | Heartbeat]:
    return [TrainingStep(ts=ts, job="steady", rank=r, node=f"n{r}", step=step, loss=2.0) for r in range(2)] + \
           [Heartbeat(ts=ts, job="steady", rank=r, node=f"n{r}", step=step) for r in range(2)]


def test_a_60s_broker_outage_raises_no_incident(own_broker: LocalBroker, topic_prefix: str, tmp_path: Path) -> None:
    servers = own_broker.settings.servers
    topics, codec = Topics(topic_prefix), Codec()
    ensure_topics(servers, topics.all(), partitions=2, replication=1, configs=topics.configs())
    producer = kafka_io.producer(kafka_io.as_broker(servers), delivery_timeout_ms=300_000, retries=1_000)
    start = time.time()

    def send(step: int, ts: float) -> None:
        for r in _records(step, ts):
            producer.send(topics.for_record(r), key=key_for(r), value=codec.encode(r))

    for i in range(400):  # history: the job is past its warm-up
        send(i, start - 400 + i)
    producer.flush()
    env = {**os.environ, "TRAINGUARD_BROKER__BOOTSTRAP": servers, "TRAINGUARD_TOPICS__PREFIX": topic_prefix,
           "TRAINGUARD_TOPICS__PARTITIONS": "2", "TRAINGUARD_WORKER__APP_ID": f"w-{topic_prefix}",
           "TRAINGUARD_WORKER__STATE_DIR": str(tmp_path / "w"), "PYTHONUNBUFFERED": "1"}
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen([sys.executable, "-m", "trainguard.cli", "worker", "--loglevel", "info"], env=env,
                              stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    stop = threading.Event()

    def live() -> None:  # the job keeps training and its agent keeps sending (buffered while the broker is down)
        step = 400
        while not stop.is_set():
            send(step, time.time())
            step += 1
            stop.wait(1.0)

    feeder = threading.Thread(target=live, daemon=True)
    try:
        feeder.start()
        time.sleep(15)  # the worker is up and following the live job
        own_broker.stop()
        time.sleep(OUTAGE_S)
        own_broker.start()
        time.sleep(25)  # the buffered records arrive, then live ones
        stop.set()
        feeder.join()
        producer.flush()
        time.sleep(5)
        consumer = kafka_io.consumer(kafka_io.as_broker(servers))
        try:
            parts = kafka_io.partitions_for(consumer, topics.name("incidents"))
            incidents = [codec.decode(m.value, Incident) for m in kafka_io.read_to_end(consumer, parts)]
        finally:
            consumer.close()
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
        assert incidents == [], incidents
        assert "started fresh" in (tmp_path / "worker.log").read_text()  # the worker really ran its tasks
    finally:
        stop.set()
        producer.close(timeout=5)
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
        log.close()
