"""Verdicts end to end (issue 25 item 3 acceptance): they move the precision a real act exports.

One real `trainguard act --executor local` (every kind in auto, so a falling
rule alerts; no agents: its stop commands time out, which verdicts do not
care about) reads incidents from
the real broker; verdicts go out signed with the console's key, exactly as
the console signs them, and one more is left by `trainguard actions verdict`.
Scraped from act's real /metrics endpoint:

* a true verdict: `trainguard_rule_precision` 1; a false one: 0.5, below the
  floor on enough verdicts, so `trainguard_rule_precision_low` is 1 and
  `rule_precision_low` is audited;
* a forged verdict, a replayed one and one on an incident act never saw
  change nothing (refused and audited);
* the CLI's false verdict: 1/3, audited under the user's name, and
  `trainguard actions report` counts the verdicts per rule;
* act stopped, its state directory deleted, a new act started: it rebuilds
  the verdicts from act-state and exports the same precision.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from processes import stop_all

from tests.e2e.act_kit import Tap, base_env, hw, trainguard
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import AuditEntry, OperatorCommand
from trainguard.schemas.signing import Signer, load_signer
from trainguard.schemas.topics import Topics, key_for

pytestmark = [pytest.mark.broker, pytest.mark.e2e]
JOB = "verdict-job"
RULE = "hw_fault.evict_swap_restart"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def send(tap: Tap, signer: Signer, incident: str, value: str, who: str = "alice", note: str = "") -> bytes:
    """Publish a verdict signed by `signer`; the exact bytes, to replay them."""
    now = time.time()
    cmd = OperatorCommand(ts=now, id=f"op-{uuid.uuid4().hex}", verb="verdict", operator=who, subject_id=incident,
                          verdict=value, reason=note, expires=now + 120)
    value_bytes = Codec().encode(cmd)
    replay(tap, value_bytes, signer.headers(value_bytes))
    return value_bytes


def replay(tap: Tap, value: bytes, headers: list[tuple[str, bytes]]) -> None:
    cmd = Codec().decode(value)
    tap.producer.send(tap.topics.for_record(cmd), key=key_for(cmd) or None, value=value, headers=headers)
    tap.producer.flush()


def scrape(port: int, name: str, rule: str = RULE) -> float | None:
    """One sample of act's /metrics (None when absent or act is not serving yet)."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(f'{name}{{rule="{rule}"}}'):
            return float(line.split()[-1])
    return None


def until(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        time.sleep(0.3)


def audited(tap: Tap, event: str, pred: Callable[[AuditEntry], bool] = lambda e: True) -> AuditEntry:
    found = tap.wait(lambda r: isinstance(r, AuditEntry) and r.event == event and pred(r), 60.0)
    assert isinstance(found, AuditEntry)
    return found


def test_verdicts_move_the_precision_a_real_act_exports_and_survive_a_move(
        kafka: str, topic_prefix: str, tmp_path: Path, keys: Any) -> None:
    port = free_port()
    keys.node("v1", "v2", "v3")
    env = base_env(kafka, topic_prefix, tmp_path, keys, TRAINGUARD_ACTIONS__ROLLOUT__DEFAULT="auto",
                   TRAINGUARD_ACTIONS__BREAKER_MAX_FRACTION="1.0", TRAINGUARD_ACTIONS__COOLDOWN_S="0",
                   TRAINGUARD_ACTIONS__ROLLOUT__PRECISION_FLOOR="0.8",
                   TRAINGUARD_ACTIONS__ROLLOUT__PRECISION_MIN_VERDICTS="2", USER="carol")
    console, forger = load_signer(keys.root / "console.key"), Signer("console", Ed25519PrivateKey.generate())
    tap = Tap(kafka, Topics(topic_prefix), keys)
    act = trainguard(env, "act", "--executor", "local", "--metrics-port", str(port), "--timeout", "240")
    acts = [act]
    try:
        audited(tap, "rails_state")
        for node in ("v1", "v2", "v3"):
            tap.publish(hw(JOB, node, time.time()))
        for node in ("v1", "v2", "v3"):
            audited(tap, "decision", lambda e, n=node: e.detail.get("incident") == f"hw-{n}")

        forged = Codec().decode(send(tap, forger, "hw-v1", "false", who="mallory"))
        assert audited(tap, "operator_rejected", lambda e: e.subject_id == forged.id).detail["verb"] == "verdict"
        send(tap, console, "hw-never", "true")
        refused = audited(tap, "operator_verdict", lambda e: e.subject_id == "hw-never")
        assert refused.detail["applied"] is False and "no decision" in refused.detail["message"]

        send(tap, console, "hw-v1", "true")
        until(lambda: scrape(port, "trainguard_rule_precision") == 1.0, 30, "precision 1 after a true verdict")
        false = send(tap, console, "hw-v2", "false", who="bob", note="the GPU was fine")
        until(lambda: scrape(port, "trainguard_rule_precision") == 0.5, 30, "precision 0.5 after a false one")
        assert scrape(port, "trainguard_rule_precision_low") == 1.0  # auto, 0.5 < 0.8 on 2 verdicts
        low = audited(tap, "rule_precision_low")
        assert low.subject_id == RULE and low.detail["precision"] == 0.5

        replay(tap, false, console.headers(false))  # the same signed bytes again
        dup = Codec().decode(false)
        assert audited(tap, "operator_rejected", lambda e: e.subject_id == dup.id).detail["reason"] == "replayed command id"

        cli = subprocess.run([sys.executable, "-m", "trainguard.cli", "actions", "verdict", "hw-v3", "false",
                              "--note", "flaky"], env=env, capture_output=True, text=True, timeout=60)
        assert cli.returncode == 0, cli.stderr
        until(lambda: scrape(port, "trainguard_rule_precision") == 0.3333, 30, "precision 1/3 after the CLI's")
        by_cli = audited(tap, "operator_verdict", lambda e: e.subject_id == "hw-v3")
        assert by_cli.actor == "carol (cli)" and by_cli.detail["applied"]
        shadow = subprocess.run([sys.executable, "-m", "trainguard.cli", "actions", "report", "--json", "--since",
                                 "1h"], env=env, capture_output=True, text=True, timeout=60)
        assert shadow.returncode == 0, shadow.stderr
        (row,) = json.loads(shadow.stdout)["rules"]
        assert row["rule"] == RULE and row["verdicts"] == {"true": 1, "false": 2, "unsure": 0}  # the report's seam

        act.send_signal(signal.SIGTERM)
        act.communicate(timeout=60)
        shutil.rmtree(tmp_path / "act")  # a new machine: only act-state remembers
        moved = trainguard(env, "act", "--executor", "local", "--metrics-port", str(port), "--timeout", "240")
        acts.append(moved)
        until(lambda: scrape(port, "trainguard_rule_precision") == 0.3333, 90, "the moved act's precision")
    finally:
        stop_all(acts, timeout_s=30)
        tap.close()
    applied = [(e.actor, e.detail["verdict"]) for e in tap.seen
               if isinstance(e, AuditEntry) and e.event == "operator_verdict" and e.detail["applied"]]
    assert applied == [("alice", "true"), ("bob", "false"), ("carol (cli)", "false")]  # mallory's and the replay: not
