"""The real `trainguard ui` and `trainguard alerts` processes over SASL_SSL, each as its own principal.

Both build their Kafka clients through `streams.kafka_io` from the YAML's
`broker:` section (TLS CA, SCRAM user, password file); before they did, they
connected with the bare address and could not reach a secured cluster. The
broker runs the StandardAuthorizer with exactly the ACLs `trainguard keys
acls` recommends, so this also shows those grants are enough for each: the
console reads the fleet and writes a signed operator command; the alert
router reads incidents with its own group and posts them to Alertmanager.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka import KafkaConsumer, KafkaProducer
from secure_broker import SecureBroker

from trainguard.schemas.codec import Codec
from trainguard.schemas.records import Incident, OperatorCommand
from trainguard.schemas.signing import generate, load_ring
from trainguard.schemas.topics import Topics, key_for
from trainguard.streams.admin import ensure_topics

pytestmark = pytest.mark.broker
PRINCIPALS = {"collector": "collector", "agent": "agent-n1", "worker": "worker", "act": "act", "console": "console",
              "alerts": "alerts"}


def config_for(b: SecureBroker, user: str, prefix: str, tmp: Path, **sections: Any) -> Path:
    broker = {"bootstrap": b.sasl_ssl, "security_protocol": "SASL_SSL", "tls": {"ca_file": str(b.ca_file)},
              "sasl": {"mechanism": "SCRAM-SHA-512", "username": user,
                       "password": {"file": str(b.password_file(user))}}, "connect_timeout_s": 30}
    path = tmp / f"{user}.yaml"
    path.write_text(yaml.safe_dump({"broker": broker, "topics": {"prefix": prefix, "partitions": 1},
                                    "metrics": {"enabled": False}, **sections}))
    return path


def start(config: Path, args: list[str], tmp: Path) -> tuple[subprocess.Popen[str], Path]:
    log = tmp / f"{args[0]}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINGUARD_")}
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "trainguard.cli", "--config", str(config), *args], env=env,
                                cwd=tmp, text=True, stdout=out, stderr=subprocess.STDOUT)
    return proc, log


def wait_for(what: str, proc: subprocess.Popen[str], log: Path, timeout_s: float = 90.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if what in line:
                return line
        assert proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.2)
    raise AssertionError(f"no {what!r} in: {log.read_text()[-3000:]}")


def get(url: str, token: str, data: bytes | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET",
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - the test's own console
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class Alertmanager(BaseHTTPRequestHandler):
    """Records every POST body (a stand-in for Alertmanager's v2 alerts endpoint)."""

    posts: list[Any] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.posts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        """Quiet."""


def test_ui_and_alerts_run_over_sasl_ssl_as_their_own_principals(secure_broker: SecureBroker, tmp_path: Path) -> None:
    prefix = f"c{uuid.uuid4().hex[:8]}."
    topics = Topics(prefix)
    ensure_topics(secure_broker.internal, topics.all(), partitions=1, replication=1)
    secure_broker.grant_recommended(prefix, PRINCIPALS)
    now = time.time()
    incident = Incident(ts=now, id="inc-sasl", kind="nan", job="llm", onset=now, detected_at=now)
    producer = KafkaProducer(bootstrap_servers=secure_broker.internal, acks="all")
    producer.send(topics.name("incidents"), key=key_for(incident), value=Codec().encode(incident))
    producer.flush()
    producer.close()

    generate(tmp_path / "keys", "console")
    users = tmp_path / "users.yaml"
    users.write_text(yaml.safe_dump({"users": [{"name": "alice", "role": "operator", "token": "op-token"}]}))
    ui_config = config_for(secure_broker, "console", prefix, tmp_path,
                           security={"console_private_key": str(tmp_path / "keys" / "console.key")})
    ui, ui_log = start(ui_config, ["ui", "--port", "0", "--credentials", str(users), "--timeout", "180"], tmp_path)
    hook = ThreadingHTTPServer(("127.0.0.1", 0), Alertmanager)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    alerts_config = config_for(secure_broker, "alerts", prefix, tmp_path)
    alerts, alerts_log = start(alerts_config, ["alerts", "--alertmanager", f"http://127.0.0.1:{hook.server_port}/",
                                               "--group-id", f"trainguard-alerts-{prefix}", "--from-beginning",
                                               "--max-records", "1", "--timeout", "120"], tmp_path)
    try:
        url = wait_for("console at ", ui, ui_log).split("console at ")[1].split()[0]
        deadline, seen = time.monotonic() + 60, []
        while not seen and time.monotonic() < deadline:
            status, page = get(f"{url}api/incidents", "op-token")
            seen = [i["id"] for i in page.get("items", [])] if status == 200 else []
            time.sleep(0.5)
        assert seen == ["inc-sasl"]  # the console's consumer read the secured cluster
        status, answer = get(f"{url}api/breaker/reset", "op-token", b'{"reason": "over sasl"}')
        assert status == 202, answer  # its producer wrote the operator topic as the console principal

        assert alerts.wait(timeout=150) == 0, alerts_log.read_text()[-3000:]
        assert "routed 1 records" in alerts_log.read_text()
        assert [a[0]["labels"]["incident_id"] for a in Alertmanager.posts] == ["inc-sasl"]
    finally:
        for proc in (ui, alerts):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
        hook.shutdown()

    reader = KafkaConsumer(topics.name("operator"), bootstrap_servers=secure_broker.internal, group_id=None,
                           auto_offset_reset="earliest", consumer_timeout_ms=10000)
    messages = list(reader)
    reader.close()
    assert len(messages) == 1
    command = Codec().decode(messages[0].value)
    assert isinstance(command, OperatorCommand) and command.operator == "alice" and command.reason == "over sasl"
    ring = load_ring([tmp_path / "keys" / "console.pub"])
    assert ring.check(messages[0].value, [(k, bytes(v)) for k, v in messages[0].headers]) == ("console", "")
