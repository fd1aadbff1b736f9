"""`trainguard alerts` as a real process: real broker in, a local HTTP receiver out.

The receiver is a plain HTTP server standing in for Alertmanager and for a
Slack incoming webhook; it records each POST and checks the bodies are the
shapes those endpoints accept (a JSON list of alerts with labels; an object
with text).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kafka import KafkaProducer

from trainguard.schemas.codec import Codec
from trainguard.schemas.records import Decision, Incident, PlannedAction
from trainguard.schemas.topics import Topics, key_for
from trainguard.streams.admin import ensure_topics
from trainguard.streams.alerts.router import AlertRouter


class Receiver:
    def __init__(self, fail_first: int = 0) -> None:
        self.posts: list[tuple[str, Any]] = []
        self.fail_first = fail_first
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if outer.fail_first > 0:
                    outer.fail_first -= 1
                    self.send_response(503)
                else:
                    outer.posts.append((self.path, body))
                    self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def records(n: int) -> list[Incident | Decision]:
    out: list[Incident | Decision] = []
    for i in range(n):
        now = time.time()
        out.append(Incident(ts=now, id=f"inc-{i}", kind="hw_fault", job="llm", onset=now, detected_at=now,
                            nodes=[f"gpu-{i}"]))
        out.append(Decision(ts=now, id=f"d-{i}", incident_id=f"inc-{i}", job="llm", kind="hw_fault",
                            rule="hw_fault.evict", plan=[PlannedAction(action="evict_node", nodes=[f"gpu-{i}"])],
                            reason=f"XID 79 on gpu-{i}: evict"))
    return out


def test_alerts_process_posts_incidents_and_decisions_with_rate_limit(kafka: str, topic_prefix: str,
                                                                      tmp_path: Path) -> None:
    receiver = Receiver()
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=1, replication=1)
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    for r in records(3):  # 6 records in a burst
        producer.send(topics.for_record(r), key=key_for(r), value=Codec().encode(r))
    producer.flush()
    producer.close()
    slack_file = tmp_path / "slack-url"
    slack_file.write_text(receiver.url + "/services/T000/B000/XXXX\n")
    env = {"TRAINGUARD_BROKER__BOOTSTRAP": kafka, "TRAINGUARD_TOPICS__PREFIX": topic_prefix, "PATH": "/usr/bin:/bin"}
    try:
        proc = subprocess.run([sys.executable, "-m", "trainguard.cli", "alerts", "--alertmanager",
                               receiver.url + "/api/v2/alerts", "--slack-url-file", str(slack_file),
                               "--burst", "4", "--per-minute", "0.001", "--from-beginning", "--group-id",
                               f"al-{topic_prefix}", "--max-records", "6", "--timeout", "60"],
                              capture_output=True, text=True, timeout=90, env=env)
    finally:
        receiver.close()
    assert proc.returncode == 0, proc.stderr
    assert "routed 6 records, 8 posts, 0 failed" in proc.stdout
    am = [body for path, body in receiver.posts if path == "/api/v2/alerts"]
    slack = [body for path, body in receiver.posts if path.startswith("/services/")]
    assert len(am) == 4 and len(slack) == 4  # burst 4, then the limit holds (2 suppressed each)
    assert all(isinstance(b, list) and b[0]["labels"]["alertname"].startswith("Trainguard") for b in am)
    decisions = [b[0] for b in am if b[0]["labels"]["alertname"] == "TrainguardDecision"]
    assert decisions and decisions[0]["annotations"]["description"].startswith("XID 79 on gpu-")
    assert all(set(b) == {"text"} for b in slack)
    assert "B000" not in proc.stdout + proc.stderr  # the webhook secret is never printed


def test_a_failing_webhook_is_retried_once_then_reported() -> None:
    receiver = Receiver(fail_first=1)
    try:
        router = AlertRouter.build(alertmanager_url=receiver.url + "/api/v2/alerts", per_minute=60, burst=5)
        inc = records(1)[0]
        assert router.route(inc) == ["alertmanager"]  # 503, then accepted
        receiver.fail_first = 2
        assert router.route(inc) == []
        assert router.failed == 1 and router.sent == 1
    finally:
        receiver.close()


def test_no_destination_is_one_line_and_exit_2() -> None:
    proc = subprocess.run([sys.executable, "-m", "trainguard.cli", "alerts"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--alertmanager" in proc.stderr
