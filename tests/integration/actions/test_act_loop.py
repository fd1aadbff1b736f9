"""The action consumer against the real broker, evicting through Kubernetes.

Real: the Kafka broker, the `ActionLoop`, the journal, the rails and the
official kubernetes client. Kubernetes itself cannot run here, so the client
talks to the fake API server of `conftest.py`. No node agents run in this
test, so the restart steps time out (after 1 s) and are recorded as failed:
what is under test is which nodes get evicted.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kafka import KafkaProducer

from schemas.codec import Codec
from schemas.records import AuditEntry, Decision, Incident, JobTopology
from schemas.topics import Topics, key_for
from streams.admin import ensure_topics
from trainguard.commands.act import build_loop

NODES = [f"n{i}" for i in range(8)]


def test_burst_across_half_the_nodes_trips_the_breaker(settings_factory: Any, topic_prefix: str, kafka: str,
                                                        tmp_path: Path, fake_kube: Any, kube_pod: Any) -> None:
    pods = [kube_pod(f"trainer-{n}", n) for n in NODES]
    with fake_kube(NODES, pods) as kube:
        settings = settings_factory(actions={
            "group_id": f"a-{topic_prefix}", "executor": "kubernetes", "state_dir": str(tmp_path / "act"),
            "command_timeout_s": 1.0, "standby_nodes": ["spare-0"], "breaker_max_fraction": 0.25,
            "kubernetes": {"host": kube.url}})
        topics = Topics(topic_prefix)
        ensure_topics(kafka, topics.all(), partitions=2, replication=1)
        producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
        codec = Codec()
        now = time.time()
        records = [JobTopology(ts=now, job="llm", world_size=8, rank_nodes=dict(enumerate(NODES)))]
        records += [Incident(ts=now + i, id=f"hw-{i}", kind="hw_fault", job="llm", onset=now + i,
                             detected_at=now + i, nodes=[NODES[i]]) for i in range(4)]
        for record in records:
            producer.send(topics.for_record(record), key=key_for(record), value=codec.encode(record))
        producer.flush()
        producer.close()

        loop = build_loop(settings, topics, executor="kubernetes", dry_run=False)
        decided: list[Decision] = []
        audit: list[AuditEntry] = []
        publish = loop.publish
        loop.runner.sink = lambda r: (audit.append(r), publish(r))  # type: ignore[union-attr]
        assert loop.run(lambda _i, d: decided.append(d), max_incidents=4, timeout_s=120) == 4

    cordoned = sorted(n for n, node in kube.nodes.items() if node["spec"].get("unschedulable"))
    assert cordoned == ["n0", "n1"]  # 2 of 8 = the 25% limit; the third would exceed it
    assert [d.status for d in sorted(decided, key=lambda d: d.incident_id)][2:] == ["blocked", "blocked"]
    assert sum(1 for a in audit if a.event == "blocked") == 2
    assert loop.metrics.value("trainguard_breaker_tripped") == 1.0
    assert loop.metrics.value("trainguard_standby_pool_exhausted") == 1.0  # spare-0 went to n0
    assert any(a.event == "standby_exhausted" for a in audit)
    swapped = loop.runner.journal.steps(decided[0].id)[1]  # type: ignore[union-attr]
    assert swapped.action == "swap_standby" and swapped.details["swaps"] == {"n0": "spare-0"}
