"""What the act end-to-end tests share: a tap on the test's topics, real processes, their environments.

Not a test module: the e2e tests import from here, never from one another,
so running or changing one test file never runs or changes another's tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer

from trainguard.schemas.codec import Codec
from trainguard.schemas.records import CheckpointEvent, Incident, JobTopology, Record
from trainguard.schemas.topics import Topics, key_for

SCRIPT = Path(__file__).parent / "agent_train_script.py"
JOB = "act-e2e"


TAPPED = ("training", "checkpoints", "actions", "action-results", "audit", "decisions")


class Tap:
    """Publishes the test's records; reads the topics `names` from the beginning and keeps what it saw."""

    def __init__(self, servers: str, topics: Topics, keys: Any = None, *, names: tuple[str, ...] = TAPPED) -> None:
        self.topics, self.codec, self.keys = topics, Codec(), keys  # keys: incidents go out worker-signed
        self.consumer = KafkaConsumer(*(topics.name(n) for n in names), bootstrap_servers=servers,
                                      auto_offset_reset="earliest", group_id=None, metadata_max_age_ms=1000)
        self.producer = KafkaProducer(bootstrap_servers=servers, acks="all")
        self.seen: list[Record] = []

    def publish(self, record: Record) -> None:
        value = self.codec.encode(record)
        headers = self.keys.signed(value, record) if self.keys is not None else None
        self.producer.send(self.topics.for_record(record), key=key_for(record), value=value, headers=headers)
        self.producer.flush()

    def wait(self, pred: Callable[[Record], bool], timeout_s: float = 90.0) -> Record:
        deadline = time.monotonic() + timeout_s
        while True:
            match = [r for r in self.seen if pred(r)]
            if match:
                return match[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"nothing matched within {timeout_s}s ({len(self.seen)} records seen)")
            for batch in self.consumer.poll(timeout_ms=300).values():
                self.seen.extend(self.codec.decode(m.value) for m in batch)

    def drain(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for batch in self.consumer.poll(timeout_ms=300).values():
                self.seen.extend(self.codec.decode(m.value) for m in batch)

    def close(self) -> None:
        self.consumer.close()
        self.producer.close()


def env_for(kafka: str, prefix: str, tmp: Path, security: dict[str, Any], **extra: str) -> dict[str, str]:
    keys = {f"TRAINGUARD_SECURITY__{k.upper()}": v if isinstance(v, str) else json.dumps(v)
            for k, v in security.items()}
    return {**os.environ, "TRAINGUARD_BROKER__BOOTSTRAP": kafka, "TRAINGUARD_TOPICS__PREFIX": prefix,
            "TRAINGUARD_TOPICS__PARTITIONS": "2", **keys,
            "TRAINGUARD_ACTIONS__STATE_DIR": str(tmp / "act"), "TRAINGUARD_ACTIONS__COMMAND_TIMEOUT_S": "90",
            "TRAINGUARD_COLLECTORS__SPOOL_DIR": str(tmp / "spool"),
            "TRAINGUARD_COLLECTORS__AGENT__STATE_DIR": str(tmp / "agent"),
            "TRAINGUARD_COLLECTORS__AGENT__GRACE_S": "5", "JOB": JOB, "NODE_NAME": "node-1", "CKPT_DIR": str(tmp / "ckpt"),
            "PYTHONUNBUFFERED": "1", **extra}


def trainguard(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "trainguard.cli", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


TRAINER = Path(__file__).parent / "stubborn_trainer.py"


def base_env(kafka: str, prefix: str, tmp: Path, keys: Any, **extra: str) -> dict[str, str]:
    return {**os.environ, "TRAINGUARD_BROKER__BOOTSTRAP": kafka, "TRAINGUARD_TOPICS__PREFIX": prefix,
            "TRAINGUARD_TOPICS__PARTITIONS": "2", **keys.env(), "TRAINGUARD_ACTIONS__GROUP_ID": f"a-{prefix}",
            "TRAINGUARD_ACTIONS__STATE_DIR": str(tmp / "act"), "TRAINGUARD_ACTIONS__COMMAND_TIMEOUT_S": "3",
            "TRAINGUARD_COLLECTORS__AGENT__GRACE_S": "10", "PYTHONUNBUFFERED": "1", **extra}


def agent(env: dict[str, str], tmp: Path, job: str, node: str) -> subprocess.Popen[str]:
    """A real node agent supervising a stand-in trainer."""
    return trainguard({**env, "TRAINGUARD_COLLECTORS__AGENT__STATE_DIR": str(tmp / f"agent-{node}"),
                  "TRAINGUARD_COLLECTORS__SPOOL_DIR": str(tmp / f"spool-{node}"), "STOP_S": "0"},
                 "run", "--job", job, "--node", node, "--linger", "120", "--", sys.executable, str(TRAINER))


def job_records(job: str, nodes: list[str], now: float) -> list[Record]:
    return [JobTopology(ts=now, job=job, world_size=len(nodes), rank_nodes=dict(enumerate(nodes))),
            CheckpointEvent(ts=now, job=job, step=100, path=f"/ck/{job}/100")]


def hw(job: str, node: str, ts: float) -> Incident:
    return Incident(ts=ts, id=f"hw-{node}", kind="hw_fault", job=job, onset=ts, detected_at=ts, nodes=[node])
