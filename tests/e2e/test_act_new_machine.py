"""`act` moved to a new machine: SIGKILLed, its journal directory deleted, started again.

What the issue's reviewer refused: act's state lived only in its local
SQLite journal, so a lost PVC (or a standby act taking the Lease) forgot
the evicted nodes, the breaker, the checkpoints. Now the journal is
mirrored on the compacted `act-state` topic. Through real processes: two
real `trainguard run` agents (node-1, node-2, and spare-1 of a two-spare
standby pool), a hardware incident on node-1 that `act` evicts (spare-1 swapped in), training steps for the ETTR account; then act is
SIGKILLed and its state directory deleted, and a new act starts with an
empty directory. It must know exactly what the old one knew (rails:
breaker window, cooldowns, standby pool, evicted nodes, restart
generations; checkpoints; topology; engine memory; ETTR; the decision and
its step outcomes), and a later NaN incident must restore from the
remembered step-100 checkpoint, addressed to node-2 and spare-1 only
(node-1 stays evicted and is never targeted).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from processes import stop_all

from tests.e2e.act_kit import TRAINER, Tap, trainguard
from trainguard.actions.journal import Journal
from trainguard.schemas.records import (
    ActionCommand,
    AttemptKey,
    AuditEntry,
    CheckpointEvent,
    Incident,
    JobTopology,
    TrainingStep,
)
from trainguard.schemas.topics import Topics

pytestmark = [pytest.mark.broker, pytest.mark.e2e]
JOB = "moved-job"
KEYS = ("rails", "engine", f"ckpt:{JOB}", f"topology:{JOB}", f"ettr:{JOB}")


def state_of(path: Path) -> dict[str, Any]:
    """Everything act knows, as its journal holds it."""
    journal = Journal(path)
    try:
        decision = journal.decision_for("hw-node-1")
        return {"decision": decision, "steps": journal.steps(decision.id) if decision else [],
                **{key: journal.get_state(key) for key in KEYS}}
    finally:
        journal.close()


def wait_for(pred: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.3)


def test_act_on_a_new_machine_knows_what_the_old_one_knew(kafka: str, topic_prefix: str, tmp_path: Path,
                                                          keys: Any) -> None:
    keys.node("node-1", "node-2", "spare-1")
    topics = Topics(topic_prefix)
    tap = Tap(kafka, topics, keys)
    state_dir = tmp_path / "act"
    base = {**os.environ, "TRAINGUARD_BROKER__BOOTSTRAP": kafka, "TRAINGUARD_TOPICS__PREFIX": topic_prefix,
            "TRAINGUARD_TOPICS__PARTITIONS": "2", **keys.env(),
            "TRAINGUARD_ACTIONS__GROUP_ID": f"a-{topic_prefix}", "TRAINGUARD_ACTIONS__STATE_DIR": str(state_dir),
            "TRAINGUARD_ACTIONS__STANDBY_NODES": '["spare-1", "spare-2"]', "TRAINGUARD_ACTIONS__COMMAND_TIMEOUT_S": "60", "TRAINGUARD_COLLECTORS__AGENT__GRACE_S": "10",
            "STOP_S": "1", "PYTHONUNBUFFERED": "1"}
    agents = {node: trainguard({**base, "TRAINGUARD_COLLECTORS__AGENT__STATE_DIR": str(tmp_path / node),
                           "TRAINGUARD_COLLECTORS__SPOOL_DIR": str(tmp_path / f"spool-{node}")},
                          "run", "--job", JOB, "--node", node, "--linger", "180", "--", sys.executable, str(TRAINER))
              for node in ("node-1", "node-2", "spare-1")}
    acts: list[subprocess.Popen[str]] = []
    try:
        now = time.time()
        tap.publish(JobTopology(ts=now, job=JOB, world_size=2, rank_nodes={0: "node-1", 1: "node-2"}))
        tap.publish(CheckpointEvent(ts=now, job=JOB, step=100, path="/ck/100"))
        for step in range(95, 121):
            tap.publish(TrainingStep(ts=now - 30 + step - 95, job=JOB, rank=0, node="node-1", step=step,
                                     loss=1.0, step_time_s=1.0))
        tap.publish(Incident(ts=now + 1, id="hw-node-1", kind="hw_fault", job=JOB, onset=now, detected_at=now + 1,
                             nodes=["node-1"]))
        for node in agents:  # every agent's training process is up (it announced its key), so a slow start
            # of three torch processes on a loaded machine does not eat the commands' 60 s timeout
            tap.wait(lambda r, n=node: isinstance(r, AttemptKey) and r.node == n, timeout_s=180)
        acts.append(trainguard(base, "act", "--executor", "local", "--timeout", "240"))
        tap.wait(lambda r: isinstance(r, AuditEntry) and r.event == "decision_executed", timeout_s=180)
        journal = state_dir / "journal.sqlite"
        wait_for(lambda: state_of(journal)["decision"].status == "executed", 30)
        time.sleep(2.0)  # the last step's outcome reaches the topic (mirrored asynchronously, no offset waits)
        acts[0].send_signal(signal.SIGKILL)
        acts[0].wait(timeout=10)
        old = state_of(journal)
        shutil.rmtree(state_dir)  # a new machine: no journal at all

        acts.append(trainguard(base, "act", "--executor", "local", "--timeout", "240"))
        wait_for(lambda: journal.exists() and state_of(journal)["decision"] is not None, 90)
        new = state_of(journal)
        for key in ("decision", "steps", *KEYS):
            assert new[key] == old[key], key
        assert old["rails"]["evicted"] == {JOB: ["node-1"]}  # what must not be forgotten, spelt out
        assert "node-1" in old["rails"]["cooldown"] and old["rails"]["breaker"]["evictions"]
        assert old["rails"]["pool"] == {"spares": ["spare-2"], "swaps": {"spare-1": "node-1"}}
        assert old[f"ckpt:{JOB}"] and old[f"topology:{JOB}"]["rank_nodes"]
        assert old[f"ettr:{JOB}"]["steps"] and old[f"ettr:{JOB}"]["episodes"]

        tap.publish(Incident(ts=time.time(), id="nan-250", kind="nan", job=JOB, onset=time.time() - 1,
                             detected_at=time.time(), step=250, ranks=[1]))
        restart = tap.wait(lambda r: isinstance(r, ActionCommand) and r.action == "restart_from_checkpoint"
                           and r.incident_id == "nan-250", timeout_s=90)
        assert restart.params.step == 100  # the remembered checkpoint, not from scratch
        assert restart.nodes == ["spare-1", "node-2"]  # node-1 stays evicted, never targeted; its spare in its place
        assert restart.params.exclude_nodes == ["node-1"]
        assert restart.params.attempt == old["rails"]["attempts"][JOB] + 1  # the generation goes on
        acts[1].send_signal(signal.SIGTERM)
        acts[1].communicate(timeout=60)
        tap.drain(1.0)
    finally:
        stop_all([*acts, *agents.values()], timeout_s=60)
        tap.close()
    node1 = [r for r in tap.seen if isinstance(r, ActionCommand) and "node-1" in r.nodes]
    assert [c.action for c in node1] == ["stop"]  # node-1 was only ever stopped
