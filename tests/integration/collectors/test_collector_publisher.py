"""The publisher against real Kafka brokers: order, compression, no loss.

The shared broker on 9092 is never stopped; the outage tests run their own
second broker (`LocalBroker` on free ports, jars shared) and stop/start it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from processes import free_port

from trainguard.collectors.publisher import Publisher
from trainguard.lab.localkafka.broker import LocalBroker
from trainguard.schemas.records import Heartbeat, NodeGpuSample, TrainingStep
from trainguard.schemas.topics import Topics
from trainguard.settings import BrokerSettings

pytestmark = pytest.mark.broker


def _step(i: int) -> TrainingStep:
    return TrainingStep(ts=1.0 + i, job="j1", rank=0, node="n0", step=i, loss=1.0)


def _steps_of(records: list[object]) -> list[int]:
    """Step numbers in arrival order, first occurrences only (delivery is at-least-once)."""
    seen: list[int] = []
    for r in records:
        if isinstance(r, TrainingStep) and r.step not in seen:
            seen.append(r.step)
    return seen


def test_records_arrive_in_order_on_their_topics(kafka: str, topic_prefix: str, tmp_path: Path,
        read_back: Callable[..., list[Any]]) -> None:
    topics = Topics(topic_prefix)
    pub = Publisher(servers=kafka, topics=topics, spool_dir=tmp_path / "spool")
    for i in range(300):
        pub.publish(_step(i))
    pub.publish(NodeGpuSample(ts=1.0, node="n0", nvml_ok=False, error="no NVML"))
    assert pub.close(timeout_s=30)
    assert len(pub.spool) == 0 and pub.stats()["sent"] == 301
    got = read_back(kafka, [topics.name("training")], expect=300)
    assert _steps_of(got) == list(range(300))
    gpu = read_back(kafka, [topics.name("gpu")], expect=1)
    assert gpu[0].error == "no NVML" and gpu[0].nvml_ok is False


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A second broker that these tests may stop and start."""
    data = tmp_path_factory.mktemp("own-kafka") / "kafka"
    settings = BrokerSettings(port=free_port(), controller_port=free_port(), data_dir=data, heap_mb=256)
    broker = LocalBroker(settings, lib_dir=Path(".trainguard/kafka-lib").resolve())
    broker.start()
    yield broker
    broker.stop()


def test_broker_restart_and_collector_restart_lose_nothing(own_broker: LocalBroker, topic_prefix: str,
                                                          tmp_path: Path,
                                                          read_back: Callable[..., list[Any]]) -> None:
    """Publish; stop the broker; keep publishing (spooled); restart the *collector* while the broker is
    still down; start the broker: every record arrives, in the order it was published."""
    servers = own_broker.settings.servers
    topics = Topics(topic_prefix)
    first = Publisher(servers=servers, topics=topics, spool_dir=tmp_path / "spool", send_timeout_s=4.0,
                      retry_backoff_s=0.5)
    for i in range(50):
        first.publish(_step(i))
    assert first.flush(timeout_s=30)
    own_broker.stop()
    for i in range(50, 150):
        first.publish(_step(i))
        first.publish(Heartbeat(ts=1.0 + i, job="j1", rank=0, node="n0", step=i))
    assert not first.flush(timeout_s=3)  # the broker is down: nothing can be acknowledged
    assert not first.close(timeout_s=2)  # the collector stops: what is undelivered stays on disk
    assert first.stats()["spooled"] == 200
    second = Publisher(servers=servers, topics=topics, spool_dir=tmp_path / "spool", retry_backoff_s=0.5)
    for i in range(150, 160):
        second.publish(_step(i))
    own_broker.start()
    assert second.close(timeout_s=60)
    assert second.stats()["dropped_low_value"] == 0 and len(second.spool) == 0
    got = read_back(servers, [topics.name("training")], expect=260)
    assert _steps_of(got) == list(range(160))
    assert {r.step for r in got if isinstance(r, Heartbeat)} == set(range(50, 150))
