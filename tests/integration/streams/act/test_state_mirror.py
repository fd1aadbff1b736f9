"""act's journal mirrored on the compacted act-state topic (real broker): a fresh journal rebuilds from it,
and a newer act fences the older one through Kafka's transactional id (the zombie's writes never land)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from kafka import KafkaProducer

from trainguard.actions.journal import Journal
from trainguard.schemas import ActionResult, Codec
from trainguard.schemas.signing import KeyRing, Signer
from trainguard.schemas.topics import Topics
from trainguard.streams.act.command_bus import KafkaCommandBus
from trainguard.streams.act.state_mirror import MirrorFenced, StateMirror
from trainguard.streams.admin import ensure_topics
from trainguard.streams.kafka_io import as_broker

pytestmark = pytest.mark.broker
ACT = Signer("act", Ed25519PrivateKey.generate())
N0 = Signer("n0", Ed25519PrivateKey.generate())
NODES = KeyRing({"n0": N0.private_key.public_key()})
RAILS = {"evicted": {"j": ["n1"]}, "cooldown": {"n1": 5.0}}


def mirror(kafka: str, topics: Topics, path: Path, fenced: threading.Event | None = None) -> StateMirror:
    return StateMirror(broker=as_broker(kafka), topic=topics.name("act-state"), journal=Journal(path),
                       transactional_id=f"{topics.prefix}act.state", writer=path.stem,
                       on_fenced=(fenced.set if fenced else lambda: None))


def test_a_fresh_journal_rebuilds_from_the_topic_and_a_newer_act_fences_the_old(kafka: str, topic_prefix: str,
                                                                                 tmp_path: Path) -> None:
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=2, replication=1, configs=topics.configs(),
                  partitions_of=topics.partitions(2))
    old_fenced = threading.Event()
    old = mirror(kafka, topics, tmp_path / "a" / "journal.sqlite", old_fenced)
    assert old.start().epoch == 1
    old.journal.put_state("rails", RAILS)
    old.journal.put_state("ckpt:j", {"steps": [100]})
    assert old.wait_durable(timeout_s=30)

    new = mirror(kafka, topics, tmp_path / "b" / "journal.sqlite")  # another machine: no journal at all
    restored = new.start()  # init_transactions: the old act's producer is fenced from here on
    assert restored.epoch == 2
    assert new.journal.get_state("rails") == RAILS and new.journal.get_state("ckpt:j") == {"steps": [100]}

    old.journal.put_state("rails", {"evicted": {}})  # the zombie still acts on its own journal...
    with pytest.raises(MirrorFenced):
        old.wait_durable(timeout_s=30)  # ...but cannot write the shared state, and is told to stop
    assert old_fenced.is_set()
    new.journal.put_state("ckpt:j", {"steps": [100, 200]})
    assert new.wait_durable(timeout_s=30)
    folded = new.read()
    assert folded.items["state/rails"].value == RAILS  # the zombie's write never landed
    assert folded.items["state/ckpt:j"].value == {"steps": [100, 200]}
    assert folded.epoch == 2
    new.close()
    old.close()


def test_results_reach_concurrent_collectors_through_one_reader(kafka: str, topic_prefix: str) -> None:
    """Plan threads of several jobs wait at once; none polls, each gets its own command's results."""
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=4, replication=1)
    bus = KafkaCommandBus(broker=kafka, topics=topics, signer=ACT, node_keys=NODES, ttl_s=60)
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    codec = Codec()
    try:
        with ThreadPoolExecutor(8) as pool:
            waits = {f"c{i}": pool.submit(bus.collect, f"c{i}", nodes=["n0"], timeout_s=30) for i in range(8)}
            time.sleep(0.5)
            for i in reversed(range(8)):
                value = codec.encode(ActionResult(ts=1.0, command_id=f"c{i}", action="stop", status="ok",
                                                  job=f"job-{i}", node="n0"))
                producer.send(topics.name("action-results"), key=f"job-{i}".encode(), value=value,
                              headers=N0.headers(value))
            producer.flush()
            got = {cid: f.result(timeout=60) for cid, f in waits.items()}
        assert {cid: [r.command_id for r in results] for cid, results in got.items()} == {c: [c] for c in waits}
    finally:
        producer.close()
        bus.close()

