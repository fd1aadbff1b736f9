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
from schemas.records import ActionResult, AuditEntry, Decision, Incident, JobTopology
from schemas.signing import load_signer
from schemas.topics import Topics, key_for
from streams.admin import ensure_topics
from trainguard.commands.act import build_loop

NODES = [f"n{i}" for i in range(8)]


def test_burst_across_half_the_nodes_trips_the_breaker(settings_factory: Any, topic_prefix: str, kafka: str,
                                                        tmp_path: Path, fake_kube: Any, kube_pod: Any,
                                                        keys: Any) -> None:
    keys.node(*NODES)
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


def test_act_trusts_only_signed_incidents_and_results(settings_factory: Any, topic_prefix: str, kafka: str,
                                                      tmp_path: Path, keys: Any) -> None:
    """Where ACLs cannot guard the incidents topic, only the worker's signed incidents are acted on;
    a result counts only when the node it names signed it. Everything else is audited."""
    keys.node("n1")
    security = {**keys.security(), "worker_public_keys": [str(keys.root / "worker.pub")]}
    settings = settings_factory(security=security, actions={"group_id": f"a-{topic_prefix}",
                                                            "state_dir": str(tmp_path / "act")})
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=1, replication=1)
    worker, n1 = load_signer(keys.root / "worker.key"), load_signer(keys.root / "nodes" / "n1.key")
    codec, now = Codec(), time.time()
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")

    def send(record: Any, signer: Any = None) -> None:
        value = codec.encode(record)
        producer.send(topics.for_record(record), key=key_for(record), value=value,
                      headers=signer.headers(value) if signer else None)

    forged_result = ActionResult(ts=now, command_id="c-x", action="self_check", status="failed", job="llm", node="n1")
    send(forged_result)  # unsigned
    send(ActionResult(ts=now, command_id="c-y", action="stop", status="ok", job="llm", node="n1"), n1)
    send(Incident(ts=now, id="forged", kind="hang", job="llm", onset=now, detected_at=now, nodes=["n1"]))
    send(Incident(ts=now, id="forged-2", kind="hang", job="llm", onset=now, detected_at=now, nodes=["n1"]), n1)
    send(Incident(ts=now, id="real", kind="hw_fault", job="llm", onset=now, detected_at=now, nodes=["n2"]), worker)
    producer.flush()
    producer.close()

    loop = build_loop(settings, topics, executor="local", dry_run=True)
    audit: list[AuditEntry] = []
    publish = loop.publish
    loop.publish = lambda r: (audit.append(r) if isinstance(r, AuditEntry) else None, publish(r))
    decided: list[Decision] = []
    assert loop.run(lambda _i, d: decided.append(d), max_incidents=1, timeout_s=60) == 1
    assert [d.incident_id for d in decided] == ["real"]
    rejected = {(a.event, a.subject_id) for a in audit if a.event.endswith("_rejected")}
    assert rejected == {("result_rejected", "c-x"), ("incident_rejected", "forged"),
                        ("incident_rejected", "forged-2")}
