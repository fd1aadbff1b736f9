"""Two `trainguard act` processes with LEASE_NAME set: only the Lease holder consumes and decides.

Real: the broker and both act processes. The Lease lives on the FAKE
Kubernetes API server (tests/fake_kube_api.py, real HTTP, bodies validated
against the V1Lease schema), since no API server can run here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_kube_api import FakeKube
from kafka import KafkaProducer
from processes import stop_all

from trainguard.schemas.codec import Codec
from trainguard.schemas.records import Incident
from trainguard.schemas.topics import Topics, key_for
from trainguard.streams.admin import ensure_topics

pytestmark = pytest.mark.e2e


def wait(what: str, predicate: object, timeout_s: float = 120) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_only_the_lease_holder_acts(kafka: str, topic_prefix: str, tmp_path: Path) -> None:
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=2, replication=1)
    with FakeKube([], []) as kube:
        def start(pod: str) -> subprocess.Popen[str]:
            env = {**os.environ, "TRAINGUARD_BROKER__BOOTSTRAP": kafka, "TRAINGUARD_TOPICS__PREFIX": topic_prefix,
                   "TRAINGUARD_TOPICS__PARTITIONS": "2", "TRAINGUARD_ACTIONS__GROUP_ID": f"a-{topic_prefix}",
                   "TRAINGUARD_ACTIONS__STATE_DIR": str(tmp_path / pod), "TRAINGUARD_ACTIONS__KUBERNETES__HOST": kube.url,
                   "LEASE_NAME": "trainguard-act", "LEASE_DURATION_S": "15", "POD_NAME": pod, "POD_NAMESPACE": "tg"}
            return subprocess.Popen([sys.executable, "-m", "trainguard.cli", "act", "--dry-run", "--timeout", "90",
                                     "--log", str(tmp_path / f"{pod}.jsonl")], env=env, text=True,
                                    stdout=open(tmp_path / f"{pod}.out", "w"), stderr=subprocess.STDOUT)

        leader = start("act-0")
        procs = [leader]
        try:
            wait("act-0 to hold the Lease", lambda: kube.leases.get(("tg", "trainguard-act"), {}).get(
                "spec", {}).get("holderIdentity") == "act-0")
            standby = start("act-1")
            procs.append(standby)
            wait("act-1 to wait", lambda: "waiting for the Lease" in (tmp_path / "act-1.out").read_text())
            now = time.time()
            incidents = [Incident(ts=now, id=f"inc-{i}", kind="hang", job=f"job-{i}", onset=now, detected_at=now,
                                  nodes=[f"n{i}"]) for i in range(4)]  # several jobs: both partitions get some
            producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
            for inc in incidents:
                producer.send(topics.for_record(inc), key=key_for(inc), value=Codec().encode(inc))
            producer.flush()
            producer.close()
            decided = tmp_path / "act-0.jsonl"
            wait("the leader's decisions", lambda: decided.exists() and len(decided.read_text().splitlines()) == 4)
            assert "act: leading" in (tmp_path / "act-0.out").read_text()
            standby_out = (tmp_path / "act-1.out").read_text()
            assert "consuming" not in standby_out and "act: leading" not in standby_out, standby_out
            assert not (tmp_path / "act-1.jsonl").exists()
            assert standby.poll() is None  # still waiting, not crashed
            # The holder keeps renewing: the standby never takes over while it lives.
            renewed = kube.leases[("tg", "trainguard-act")]["spec"]["renewTime"]
            wait("a renewal", lambda: kube.leases[("tg", "trainguard-act")]["spec"]["renewTime"] != renewed, 30)
            assert kube.leases[("tg", "trainguard-act")]["spec"]["holderIdentity"] == "act-0"
            assert kube.rejected == []
        finally:
            stop_all(procs, timeout_s=30)
