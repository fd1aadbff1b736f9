"""`trainguard act` killed with SIGKILL mid-eviction: the fleet ends as if it had not been.

The issue's worst point, through real processes: two real `trainguard run`
agents supervise a job on node-1 and node-2 (a stand-in trainer that takes
4 s to stop); a hardware incident on node-1 makes `act` evict it (a `stop`
to node-1's agent). While that stop is under way, `act` is killed with
SIGKILL and started again. The new `act` resumes the plan from the journal:
it re-sends the same signed stop, the agent answers "already executed", and
that counts as done. Expected, exactly as without the kill: node-1 is
recorded as evicted (breaker, cooldown, evicted set), the restart goes to
node-2 only, node-1 never trains again.
"""

from __future__ import annotations

import os
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
from trainguard.schemas.records import ActionCommand, ActionResult, AuditEntry, CheckpointEvent, Incident, JobTopology
from trainguard.schemas.topics import Topics

pytestmark = [pytest.mark.broker, pytest.mark.e2e]
JOB = "sigkill-job"


def test_act_killed_while_an_agent_stops_the_evicted_node(kafka: str, topic_prefix: str, tmp_path: Path,
                                                          keys: Any) -> None:
    keys.node("node-1", "node-2")
    topics = Topics(topic_prefix)
    tap = Tap(kafka, topics, keys)
    base = {**os.environ, "TRAINGUARD_BROKER__BOOTSTRAP": kafka, "TRAINGUARD_TOPICS__PREFIX": topic_prefix,
            "TRAINGUARD_TOPICS__PARTITIONS": "2", **keys.env(),
            "TRAINGUARD_ACTIONS__GROUP_ID": f"a-{topic_prefix}", "TRAINGUARD_ACTIONS__STATE_DIR": str(tmp_path / "act"),
            "TRAINGUARD_ACTIONS__COMMAND_TIMEOUT_S": "60", "TRAINGUARD_COLLECTORS__AGENT__GRACE_S": "10",
            "STOP_S": "4", "PYTHONUNBUFFERED": "1"}
    agents = {node: trainguard({**base, "TRAINGUARD_COLLECTORS__AGENT__STATE_DIR": str(tmp_path / node),
                           "TRAINGUARD_COLLECTORS__SPOOL_DIR": str(tmp_path / f"spool-{node}")},
                          "run", "--job", JOB, "--node", node, "--linger", "120", "--", sys.executable, str(TRAINER))
              for node in ("node-1", "node-2")}
    acts: list[subprocess.Popen[str]] = []
    try:
        now = time.time()
        tap.publish(JobTopology(ts=now, job=JOB, world_size=2, rank_nodes={0: "node-1", 1: "node-2"}))
        tap.publish(CheckpointEvent(ts=now, job=JOB, step=100, path="/ck/100"))
        tap.publish(Incident(ts=now + 1, id="hw-node-1", kind="hw_fault", job=JOB, onset=now, detected_at=now + 1,
                             nodes=["node-1"]))
        acts.append(trainguard(base, "act", "--executor", "local", "--timeout", "120"))
        stop = tap.wait(lambda r: isinstance(r, ActionCommand) and r.action == "stop", timeout_s=90)
        time.sleep(1.0)  # node-1's agent is now 1 s into its 4 s stop
        acts[0].send_signal(signal.SIGKILL)
        acts[0].wait(timeout=10)
        acts.append(trainguard(base, "act", "--executor", "local", "--timeout", "120"))
        tap.wait(lambda r: isinstance(r, AuditEntry) and r.event.startswith("decision_")
                 and r.event != "decision", timeout_s=120)
        acts[1].send_signal(signal.SIGTERM)
        acts[1].communicate(timeout=60)
        tap.drain(2.0)
    finally:
        stop_all([*acts, *agents.values()], timeout_s=60)
        tap.close()

    journal = Journal(tmp_path / "act" / "journal.sqlite")
    decision = journal.decision_for("hw-node-1")
    assert decision is not None and decision.status == "executed"
    evict, swap, restart = journal.steps(decision.id)
    assert evict.action == "evict_node" and evict.status == "ok"  # "already executed" counted as done
    rails = journal.get_state("rails")
    assert rails["evicted"] == {JOB: ["node-1"]}
    assert "node-1" in rails["cooldown"] and [e[2] for e in rails["breaker"]["evictions"]] == ["node-1"]
    stops = [r for r in tap.seen if isinstance(r, ActionCommand) and r.action == "stop"]
    assert {s.id for s in stops} == {stop.id} and all(s.nodes == ["node-1"] for s in stops)
    restarts = [r for r in tap.seen if isinstance(r, ActionCommand) and r.action == "restart_from_checkpoint"]
    assert restarts and all(r.nodes == ["node-2"] for r in restarts)  # never a broadcast, never node-1
    assert restarts[0].params.step == 100
    node1 = [r for r in tap.seen if isinstance(r, ActionResult) and r.node == "node-1"]
    assert {r.command_id for r in node1} == {stop.id}  # node-1 only ever stopped
    assert any(r.node == "node-2" and r.status == "ok" for r in tap.seen
               if isinstance(r, ActionResult) and r.action == "restart_from_checkpoint")
