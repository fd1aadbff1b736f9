"""The real `trainguard worker` and `trainguard act` processes over SASL_SSL (SCRAM-SHA-512).

Configured as a user would: one YAML file whose `broker:` section names the
TLS CA and a password *file*. Telemetry goes in through the collectors'
`Publisher`; the worker (Faust app and fast path) turns a NaN step into a
signed incident; act, which accepts only incidents signed by the worker,
decides on it. Everything crosses the secured listener.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import yaml
from kafka import KafkaConsumer
from secure_broker import SecureBroker

from trainguard.collectors.publisher import Publisher
from trainguard.schemas.codec import Codec
from trainguard.schemas.kafka_config import BrokerSettings, client_options
from trainguard.schemas.records import CheckpointEvent, Incident, TrainingStep
from trainguard.schemas.signing import generate
from trainguard.schemas.topics import Topics


def test_worker_and_act_run_over_sasl_ssl(secure_broker: SecureBroker, tmp_path: Path) -> None:
    prefix = f"p{uuid.uuid4().hex[:8]}."
    broker = {"bootstrap": secure_broker.sasl_ssl, "security_protocol": "SASL_SSL",
              "tls": {"ca_file": str(secure_broker.ca_file)},
              "sasl": {"mechanism": "SCRAM-SHA-512", "username": "admin",
                       "password": {"file": str(secure_broker.password_file("admin"))}},
              "connect_timeout_s": 30}
    generate(tmp_path / "keys", "worker")
    config = tmp_path / "trainguard.yaml"
    config.write_text(yaml.safe_dump({
        "broker": broker, "topics": {"prefix": prefix, "partitions": 1},
        "worker": {"app_id": f"w-{prefix}", "state_dir": str(tmp_path / "worker")},
        "actions": {"group_id": f"a-{prefix}", "state_dir": str(tmp_path / "act")},
        "security": {"worker_private_key": str(tmp_path / "keys" / "worker.key"),
                     "worker_public_keys": [str(tmp_path / "keys" / "worker.pub")]},
        "metrics": {"enabled": False}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINGUARD_")}
    cli = [sys.executable, "-m", "trainguard.cli", "--config", str(config)]
    worker = subprocess.Popen([*cli, "worker"], env=env, cwd=tmp_path, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        settings = BrokerSettings.model_validate(broker)
        opts = client_options(settings, "kafka-python")
        publisher = Publisher(servers=settings.servers, topics=Topics(prefix), spool_dir=tmp_path / "spool",
                              client_options=opts)
        for record in (CheckpointEvent(ts=1000.0, job="llm", step=200, path="/ckpt/200"),
                       TrainingStep(ts=1150.0, job="llm", rank=0, node="node-0", step=249, loss=2.1),
                       TrainingStep(ts=1151.0, job="llm", rank=3, node="node-1", step=250, loss="nan"),
                       TrainingStep(ts=1153.0, job="llm", rank=0, node="node-0", step=251, loss=2.0),
                       # event time past the NaN detector's settle window (settle + twice the skew bound)
                       TrainingStep(ts=1160.0, job="llm", rank=0, node="node-0", step=252, loss=2.0)):
            publisher.publish(record)
        assert publisher.close(timeout_s=60)

        consumer = KafkaConsumer(f"{prefix}incidents", bootstrap_servers=settings.servers, group_id=None,
                                 auto_offset_reset="earliest", consumer_timeout_ms=180000, **opts)
        message = next(iter(consumer))
        consumer.close()
        incident = Codec().decode(message.value)
        assert isinstance(incident, Incident) and incident.kind == "nan"
        assert dict(message.headers)["tg-kid"] == b"worker"  # signed by the worker

        act = subprocess.run([*cli, "act", "--dry-run", "--max-incidents", "1", "--timeout", "120",
                              "--log", str(tmp_path / "decisions.jsonl")],
                             env=env, cwd=tmp_path, text=True, capture_output=True, timeout=200)
        assert act.returncode == 0, act.stdout[-3000:] + act.stderr[-3000:]
        said = " ".join((act.stdout + act.stderr).split())  # act runs inside Faust's worker, which redirects stdout
        assert "restore the latest checkpoint before step 250" in said
    finally:
        worker.terminate()
        try:
            out, _ = worker.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            out, _ = worker.communicate()
    assert "admin-secret" not in out  # the password is never logged
