"""Trusting checkpoints and topologies by Kafka ACLs alone is a named choice (real broker, real `trainguard act`).

By default (the setting unset) act refuses and audits an unsigned checkpoint and shows
`trainguard_act_job_records_unverified 0`; with `security.job_records_trusted_by_acl: true` it
prints a WARNING naming the setting and shows 1 on /metrics (its readiness probe), and uses the
record (nothing is refused).
"""

from __future__ import annotations

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

from trainguard.schemas.codec import Codec
from trainguard.schemas.records import AuditEntry, CheckpointEvent
from trainguard.schemas.topics import Topics, key_for
from trainguard.streams.admin import ensure_topics


def _run_act(env: dict[str, str], port: int) -> tuple[str, str]:
    """Run act for a few seconds; its output and the unverified-records metric it showed."""
    cmd = [sys.executable, "-m", "trainguard.cli", "act", "--executor", "local", "--timeout", "15",
           "--metrics-port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metric, deadline = "", time.monotonic() + 60
    while not metric and time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as page:  # noqa: S310
                metric = next((line for line in page.read().decode().splitlines()
                               if line.startswith("trainguard_act_job_records_unverified ")), "")
        except OSError:
            time.sleep(0.3)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    return " ".join(out.split()), metric


def test_unsigned_job_records_are_refused_by_default_and_trusted_only_by_name(
        topic_prefix: str, kafka: str, tmp_path: Path, keys: Any) -> None:
    keys.node("n1")  # act needs node keys to start (it verifies results and attempt keys with them)
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=1, replication=1)
    unsigned = CheckpointEvent(ts=time.time(), job="llm", step=900, path="/forged/900")
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    producer.send(topics.for_record(unsigned), key=key_for(unsigned), value=Codec().encode(unsigned))
    producer.flush()
    producer.close()
    base = {**os.environ, "TRAINGUARD_BROKER__BOOTSTRAP": kafka, "TRAINGUARD_TOPICS__PREFIX": topic_prefix,
            "TRAINGUARD_TOPICS__PARTITIONS": "1"}

    default = {**base, **keys.env(job_records="signed"), "TRAINGUARD_ACTIONS__GROUP_ID": f"d-{topic_prefix}",
               "TRAINGUARD_ACTIONS__STATE_DIR": str(tmp_path / "d")}
    said, metric = _run_act(default, free_port())
    assert metric == "trainguard_act_job_records_unverified 0.0"
    assert "job_records_trusted_by_acl" not in said
    refused = [a for a in read_all(kafka, topics.name("audit"), Codec())
               if isinstance(a, AuditEntry) and a.event == "checkpoint_rejected"]
    assert [(a.detail["path"], a.detail["reason"]) for a in refused] == [
        ("/forged/900", "unsigned (no tg-kid/tg-sig headers): not from an attempt of the job")]

    trusting = {**base, **keys.env(job_records="trusted"), "TRAINGUARD_ACTIONS__GROUP_ID": f"t-{topic_prefix}",
                "TRAINGUARD_ACTIONS__STATE_DIR": str(tmp_path / "t")}
    assert trusting["TRAINGUARD_SECURITY__JOB_RECORDS_TRUSTED_BY_ACL"] == "True"
    said, metric = _run_act(trusting, free_port())
    assert metric == "trainguard_act_job_records_unverified 1.0"
    assert "WARNING" in said and "security.job_records_trusted_by_acl" in said
    refused_after = [a for a in read_all(kafka, topics.name("audit"), Codec())
                     if isinstance(a, AuditEntry) and a.event == "checkpoint_rejected"]
    assert len(refused_after) == 1  # the trusting act refused nothing
