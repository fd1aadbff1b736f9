"""`trainguard act` (the Faust app) against the real broker, evicting through Kubernetes.

Real: the Kafka broker, the `trainguard act` process, the journal, the rails
and the official kubernetes client. Kubernetes itself cannot run here, so the
client talks to the fake API server of `conftest.py`. No node agents run in
this test, so the restart steps time out (after 1 s) and are recorded as
failed: what is under test is which nodes get evicted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from kafka import KafkaProducer
from kafka_reads import read_all
from processes import free_port

from trainguard.actions.journal import Journal
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import ActionResult, AuditEntry, Incident, JobTopology
from trainguard.schemas.signing import load_signer
from trainguard.schemas.topics import Topics, key_for
from trainguard.streams.admin import ensure_topics

NODES = [f"n{i}" for i in range(8)]


def test_burst_across_half_the_nodes_trips_the_breaker(topic_prefix: str, kafka: str, tmp_path: Path,
                                                        fake_kube: Any, kube_pod: Any, keys: Any) -> None:
    keys.node(*NODES)
    pods = [kube_pod(f"trainer-{n}", n) for n in NODES]
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=2, replication=1)
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    codec = Codec()
    now = time.time()
    records = [JobTopology(ts=now, job="llm", world_size=8, rank_nodes=dict(enumerate(NODES)))]
    records += [Incident(ts=now + i, id=f"hw-{i}", kind="hw_fault", job="llm", onset=now + i,
                         detected_at=now + i, nodes=[NODES[i]]) for i in range(4)]
    for record in records:
        value = codec.encode(record)
        producer.send(topics.for_record(record), key=key_for(record), value=value, headers=keys.signed(value, record))
    producer.flush()
    producer.close()
    log = tmp_path / "decisions.jsonl"
    with fake_kube(NODES, pods) as kube:
        env = {**os.environ, "TRAINGUARD_BROKER__BOOTSTRAP": kafka, "TRAINGUARD_TOPICS__PREFIX": topic_prefix,
               "TRAINGUARD_TOPICS__PARTITIONS": "2", "TRAINGUARD_ACTIONS__GROUP_ID": f"a-{topic_prefix}",
               "TRAINGUARD_ACTIONS__STATE_DIR": str(tmp_path / "act"), "TRAINGUARD_ACTIONS__COMMAND_TIMEOUT_S": "1",
               "TRAINGUARD_ACTIONS__STANDBY_NODES": '["spare-0"]', "TRAINGUARD_ACTIONS__BREAKER_MAX_FRACTION": "0.25",
               "TRAINGUARD_ACTIONS__KUBERNETES__HOST": kube.url, **keys.env()}
        done = subprocess.run([sys.executable, "-m", "trainguard.cli", "act", "--executor", "kubernetes",
                               "--max-incidents", "4", "--timeout", "120", "--log", str(log)],
                              env=env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr
    decided = sorted((json.loads(line) for line in log.read_text().splitlines()), key=lambda d: d["incident_id"])
    assert len(decided) == 4
    cordoned = sorted(n for n, node in kube.nodes.items() if node["spec"].get("unschedulable"))
    assert cordoned == ["n0", "n1"]  # 2 of 8 = the 25% limit; the third would exceed it
    assert [d["status"] for d in decided][2:] == ["blocked", "blocked"]
    journal = Journal(tmp_path / "act" / "journal.sqlite")
    rails = journal.get_state("rails")
    assert rails["breaker"]["tripped"] and rails["pool"]["spares"] == []  # spare-0 went to n0
    swapped = journal.steps(decided[0]["id"])[1]
    assert swapped.action == "swap_standby" and swapped.details["swaps"] == {"n0": "spare-0"}


def test_act_trusts_only_signed_incidents_and_results(topic_prefix: str, kafka: str, tmp_path: Path,
                                                      keys: Any) -> None:
    """With the default settings (the keys `trainguard keys generate` makes), only the worker's signed
    incidents are acted on; a result counts only when the node it names signed it and its command (one act
    sent) addressed that node. Everything else is audited."""
    keys.node("n1")
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

    log = tmp_path / "decisions.jsonl"
    env = {**os.environ, "TRAINGUARD_BROKER__BOOTSTRAP": kafka, "TRAINGUARD_TOPICS__PREFIX": topic_prefix,
           "TRAINGUARD_TOPICS__PARTITIONS": "1", "TRAINGUARD_ACTIONS__GROUP_ID": f"a-{topic_prefix}",
           "TRAINGUARD_ACTIONS__STATE_DIR": str(tmp_path / "act"),
           **keys.env()}
    done = subprocess.run([sys.executable, "-m", "trainguard.cli", "act", "--dry-run", "--max-incidents", "1",
                           "--timeout", "60", "--log", str(log)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    decided = [json.loads(line) for line in log.read_text().splitlines()]
    assert [d["incident_id"] for d in decided] == ["real"]
    audit = read_all(kafka, topics.name("audit"), codec)
    rejected = {(a.event, a.subject_id) for a in audit if isinstance(a, AuditEntry) and a.event.endswith("_rejected")}
    # c-y is n1's good signature, but on a command act never sent: it addressed nobody, so it counts for nothing
    assert rejected == {("result_rejected", "c-x"), ("result_rejected", "c-y"), ("incident_rejected", "forged"),
                        ("incident_rejected", "forged-2")}
    reasons = {a.subject_id: a.detail["reason"] for a in audit if isinstance(a, AuditEntry)
               and a.event == "result_rejected"}
    assert reasons["c-y"].startswith("not a target") and not reasons["c-x"].startswith("not a target")


def test_without_a_worker_key_act_refuses_to_start_unless_acls_are_trusted_by_name(
        topic_prefix: str, kafka: str, tmp_path: Path, keys: Any) -> None:
    """With the default keys, a real (not dry-run) act refuses an unsigned incident and audits it. No worker
    key: one line, exit 2, naming the setting. Set explicitly, act starts, warns naming it, shows it on
    /metrics (its readiness probe), and then acts on the unsigned incident."""
    keys.node("n1")
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=1, replication=1)
    base = {**os.environ, "TRAINGUARD_BROKER__BOOTSTRAP": kafka, "TRAINGUARD_TOPICS__PREFIX": topic_prefix,
            "TRAINGUARD_TOPICS__PARTITIONS": "1", "TRAINGUARD_ACTIONS__GROUP_ID": f"a-{topic_prefix}",
            "TRAINGUARD_ACTIONS__STATE_DIR": str(tmp_path / "act"), "TRAINGUARD_ACTIONS__APPROVAL_KINDS": '["hw_fault"]',
            **keys.env(worker_public_keys=[])}  # held for approval: nothing waits for an agent
    base.pop("TRAINGUARD_SECURITY__WORKER_PRIVATE_KEY")
    log = tmp_path / "decisions.jsonl"
    cmd = [sys.executable, "-m", "trainguard.cli", "act", "--executor", "local", "--max-incidents", "1",
           "--timeout", "60", "--log", str(log)]
    refused = subprocess.run(cmd, env=base, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "incidents_trusted_by_acl" in refused.stderr and "worker_public_keys" in refused.stderr

    now = time.time()
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    unsigned = Incident(ts=now, id="by-acl", kind="hw_fault", job="llm", onset=now, detected_at=now, nodes=["n1"])
    producer.send(topics.for_record(unsigned), key=key_for(unsigned), value=Codec().encode(unsigned))
    producer.flush()
    producer.close()
    defaults = {**os.environ, **{k: v for k, v in base.items() if k.startswith("TRAINGUARD_")}, **keys.env(),
                "TRAINGUARD_ACTIONS__GROUP_ID": f"d-{topic_prefix}", "TRAINGUARD_ACTIONS__STATE_DIR": str(tmp_path / "d")}
    by_default = subprocess.run([*cmd[:-4], "--timeout", "12", "--log", str(tmp_path / "default.jsonl")],
                                env=defaults, capture_output=True, text=True, timeout=90)
    assert by_default.returncode == 0, by_default.stdout + by_default.stderr
    assert not (tmp_path / "default.jsonl").exists()  # the default act (not a dry run) decided nothing
    audit = read_all(kafka, topics.name("audit"), Codec())
    assert [(a.event, a.detail["reason"]) for a in audit if isinstance(a, AuditEntry) and a.subject_id == "by-acl"] == [
        ("incident_rejected", "unsigned (no tg-kid/tg-sig headers)")]

    port = free_port()
    trusting = {**base, "TRAINGUARD_SECURITY__INCIDENTS_TRUSTED_BY_ACL": "true"}
    proc = subprocess.Popen([*cmd, "--metrics-port", str(port)], env=trusting, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    metric = ""
    deadline = time.monotonic() + 60
    while not metric and time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as page:  # noqa: S310
                metric = next((line for line in page.read().decode().splitlines()
                               if line.startswith("trainguard_act_incidents_unverified ")), "")
        except OSError:
            time.sleep(0.3)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    said = " ".join(out.split())
    assert "WARNING" in said and "security.incidents_trusted_by_acl" in said
    assert metric == "trainguard_act_incidents_unverified 1.0"
    decided = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(d["incident_id"], d["status"]) for d in decided] == [("by-acl", "awaiting_approval")]


