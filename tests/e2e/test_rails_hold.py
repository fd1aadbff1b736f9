"""The rails against a partitioned network and a hostile writer (issue 20), through real processes.

A real `trainguard act --executor local` reads incidents from the real broker
and sends signed stops to real `trainguard run` agents. What the issue
measured, tried again:

* agents that never answer (SIGSTOPped: the partitioned switch): a burst of
  node incidents sends no more stops than the breaker allows, and the nodes
  that never answered stay counted;
* concurrent plans of many jobs never send more stops than the fleet cap;
* incidents dated days apart, or years ahead, cannot widen what the breaker
  lets through (its window runs on act's clock);
* a result correctly signed by a node the command did not address is ignored
  and audited: it cannot fail another node's eviction.

Each test publishes its records first, then runs one `act`, short command
timeouts keeping it under a minute.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from processes import stop_all

from tests.e2e.act_kit import Tap, agent, base_env, hw, job_records, trainguard
from trainguard.actions.journal import Journal
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import ActionCommand, ActionResult, AuditEntry
from trainguard.schemas.signing import load_signer
from trainguard.schemas.topics import Topics

pytestmark = [pytest.mark.broker, pytest.mark.e2e]


def run_act(env: dict[str, str], incidents: int, timeout_s: float = 50) -> str:
    act = trainguard(env, "act", "--executor", "local", "--max-incidents", str(incidents), "--timeout", str(timeout_s))
    try:
        out, _ = act.communicate(timeout=timeout_s + 30)
    finally:
        stop_all([act], timeout_s=10)
    assert act.returncode == 0, out
    return out


def stops(tap: Tap) -> list[ActionCommand]:
    return [r for r in tap.seen if isinstance(r, ActionCommand) and r.action == "stop"]


def audits(tap: Tap, event: str) -> list[AuditEntry]:
    return [r for r in tap.seen if isinstance(r, AuditEntry) and r.event == event]


def wait_plans(tap: Tap, count: int, timeout_s: float = 60) -> None:
    """Until `count` decisions ended (executed, failed or blocked)."""
    deadline = time.monotonic() + timeout_s
    while len([a for a in tap.seen if isinstance(a, AuditEntry) and a.event.startswith("decision_")]) < count:
        assert time.monotonic() < deadline, "plans did not end in time"
        tap.drain(0.5)


def test_agents_that_never_answer_get_no_more_stops_than_the_breaker_allows(
        kafka: str, topic_prefix: str, tmp_path: Path, keys: Any) -> None:
    """One job of 10 nodes; 8 hardware incidents while every agent is frozen: 2 stops (25%), then held."""
    nodes = [f"pn{i}" for i in range(10)]
    keys.node(*nodes)
    env = base_env(kafka, topic_prefix, tmp_path, keys)
    tap = Tap(kafka, Topics(topic_prefix), keys)
    agents = [agent(env, tmp_path, "part-job", n) for n in nodes[:3]]  # real agents, then partitioned
    try:
        time.sleep(3)
        for proc in agents:
            proc.send_signal(signal.SIGSTOP)
        now = time.time()
        for record in job_records("part-job", nodes, now):
            tap.publish(record)
        for i, node in enumerate(nodes[:8]):
            tap.publish(hw("part-job", node, now + i))
        run_act(env, 8)
        wait_plans(tap, 8)
    finally:
        for proc in agents:
            proc.send_signal(signal.SIGCONT)
        stop_all(agents, timeout_s=30)
        tap.drain(1.0)
        tap.close()
    sent = {n for s in stops(tap) for n in s.nodes}
    assert sent == {"pn0", "pn1"}, sent  # 25% of 10 nodes, though not one stop was answered
    rails = Journal(tmp_path / "act" / "journal.sqlite").get_state("rails")
    assert {e[2] for e in rails["breaker"]["evictions"]} == {"pn0", "pn1"}  # timed out: still counted
    assert {"pn0", "pn1"} <= set(rails["cooldown"]) and rails["breaker"]["tripped"]
    assert not [r for r in tap.seen if isinstance(r, ActionCommand) and r.action == "restart_from_checkpoint"]


def test_concurrent_plans_of_forty_jobs_never_exceed_the_fleet_cap(
        kafka: str, topic_prefix: str, tmp_path: Path, keys: Any) -> None:
    """40 jobs, one incident each, 8 plans at once, some agents answering: at most 4 stops fleet-wide."""
    jobs = [f"fj{i}" for i in range(40)]
    keys.node(*(f"{j}-n0" for j in jobs))
    env = base_env(kafka, topic_prefix, tmp_path, keys, TRAINGUARD_ACTIONS__PLAN_WORKERS="8",
                   TRAINGUARD_ACTIONS__FLEET_MAX_EVICTIONS="4")
    tap = Tap(kafka, Topics(topic_prefix), keys)
    agents = [agent(env, tmp_path, j, f"{j}-n0") for j in jobs[:2]]  # two answer at once, the rest never
    try:
        now = time.time()
        for job in jobs:
            for record in job_records(job, [f"{job}-n{k}" for k in range(8)], now):
                tap.publish(record)
        time.sleep(3)
        for job in jobs:
            tap.publish(hw(job, f"{job}-n0", now))
        run_act(env, len(jobs))
        wait_plans(tap, len(jobs))
    finally:
        stop_all(agents, timeout_s=30)
        tap.drain(1.0)
        tap.close()
    sent = [n for s in stops(tap) for n in s.nodes]
    assert 1 <= len(set(sent)) <= 4 and len(sent) == len(set(sent)), sent
    blocked = audits(tap, "decision_blocked")
    assert len(blocked) >= len(jobs) - 4


def test_spread_out_and_future_dates_cannot_widen_the_breaker(
        kafka: str, topic_prefix: str, tmp_path: Path, keys: Any) -> None:
    """Four one-node jobs whose agents answer; incidents days apart, the last years ahead: the cap (2) holds."""
    jobs = [f"tj{i}" for i in range(4)]
    keys.node(*(f"{j}-n0" for j in jobs))
    env = base_env(kafka, topic_prefix, tmp_path, keys, TRAINGUARD_ACTIONS__FLEET_MAX_EVICTIONS="2",
                   TRAINGUARD_ACTIONS__COMMAND_TIMEOUT_S="15")
    tap = Tap(kafka, Topics(topic_prefix), keys)
    agents = [agent(env, tmp_path, j, f"{j}-n0") for j in jobs]
    try:
        now = time.time()
        for job in jobs:
            for record in job_records(job, [f"{job}-n0"], now):
                tap.publish(record)
        time.sleep(4)  # the agents are reading their commands
        dates = [now - 3 * 86400, now - 2 * 86400, now - 86400, now + 3e7]  # ascending, then a year ahead
        for job, ts in zip(jobs, dates, strict=True):
            tap.publish(hw(job, f"{job}-n0", ts))
        run_act(env, len(jobs))
        wait_plans(tap, len(jobs))
    finally:
        stop_all(agents, timeout_s=30)
        tap.drain(1.0)
        tap.close()
    sent = {n for s in stops(tap) for n in s.nodes}
    assert len(sent) == 2, sent
    answered = {r.node for r in tap.seen if isinstance(r, ActionResult) and r.action == "stop" and r.status == "ok"}
    assert answered == sent  # these were real evictions, answered, and the window still held
    skewed = {a.subject_id for a in audits(tap, "record_clock_skew")}
    assert skewed == {f"hw-{j}-n0" for j in jobs}  # every one of them dated a day or more away: audited


def test_a_non_targets_signed_result_cannot_fail_another_nodes_eviction(
        kafka: str, topic_prefix: str, tmp_path: Path, keys: Any) -> None:
    """node-b signs a "failed" for the stop addressed to node-a; node-a's own answer decides."""
    keys.node("node-a", "node-b")
    env = base_env(kafka, topic_prefix, tmp_path, keys, TRAINGUARD_ACTIONS__COMMAND_TIMEOUT_S="30")
    topics = Topics(topic_prefix)
    tap = Tap(kafka, topics, keys)
    slow = agent({**env}, tmp_path, "nt-job", "node-a")
    other = agent(env, tmp_path, "nt-job", "node-b")
    act: subprocess.Popen[str] | None = None
    try:
        now = time.time()
        for record in job_records("nt-job", ["node-a", "node-b"], now):
            tap.publish(record)
        time.sleep(3)
        slow.send_signal(signal.SIGSTOP)  # node-a answers only once the forged result is in
        tap.publish(hw("nt-job", "node-a", now))
        act = trainguard(env, "act", "--executor", "local", "--max-incidents", "1", "--timeout", "50")
        stop = tap.wait(lambda r: isinstance(r, ActionCommand) and r.action == "stop", timeout_s=40)
        assert isinstance(stop, ActionCommand) and stop.nodes == ["node-a"]
        forged = ActionResult(ts=time.time(), command_id=stop.id, action="stop", status="failed", job="nt-job",
                              node="node-b", message="node-a is broken, trust me",
                              details={"culprits": ["node-a"]})
        value = Codec().encode(forged)
        signer = load_signer(Path(keys.root) / "nodes" / "node-b.key", "node-b")  # node-b's real key
        tap.producer.send(topics.name("action-results"), key=b"nt-job", value=value, headers=signer.headers(value))
        tap.producer.flush()
        time.sleep(2)
        slow.send_signal(signal.SIGCONT)
        out, _ = act.communicate(timeout=80)
        assert act.returncode == 0, out
        wait_plans(tap, 1)
    finally:
        slow.send_signal(signal.SIGCONT)
        stop_all([p for p in (act, slow, other) if p is not None], timeout_s=30)
        tap.drain(1.0)
        tap.close()
    journal = Journal(tmp_path / "act" / "journal.sqlite")
    decision = journal.decision_for("hw-node-a")
    assert decision is not None and decision.status == "executed"
    evict = journal.steps(decision.id)[0]
    assert evict.status == "ok" and evict.details["per_node"] == {"node-a": "ok"}
    assert "culprits" not in evict.details and "node-b" not in evict.message
    rejected = [a for a in audits(tap, "result_rejected") if a.detail.get("node") == "node-b"]
    assert rejected and "not a target" in rejected[0].detail["reason"]
    # act's own edge drops it too: no action_result audit (nor ETTR localisation) from the non-target
    assert not [a for a in audits(tap, "action_result") if a.actor == "node-b" and a.subject_id == stop.id]
    assert evict.details["addressed"] == ["node-a"]
    restarts = [r for r in tap.seen if isinstance(r, ActionCommand) and r.action == "restart_from_checkpoint"]
    assert [r.nodes for r in restarts] == [["node-b"]]


def test_a_return_then_an_eviction_restarts_each_node_once_with_every_spare(
        kafka: str, topic_prefix: str, tmp_path: Path, keys: Any) -> None:
    """The measured bug: after return_node the restart went to [n1, n2, n4, n2]. Real agents on every node.

    rn2 is evicted and replaced by the spare rs0; rn2 is repaired and returned to the pool (the
    operator's queue in act's journal, as `trainguard actions return-node` leaves it); then rn4 is
    evicted and replaced by rn2. The second restart must go to rn1, rs0, rn3 and rn2, each once.
    """
    nodes, spare = ["rn1", "rn2", "rn3", "rn4"], "rs0"
    keys.node(*nodes, spare)
    env = base_env(kafka, topic_prefix, tmp_path, keys, TRAINGUARD_ACTIONS__COMMAND_TIMEOUT_S="20",
                   TRAINGUARD_ACTIONS__BREAKER_MAX_FRACTION="0.5",
                   TRAINGUARD_ACTIONS__STANDBY_NODES=f'["{spare}"]')
    tap = Tap(kafka, Topics(topic_prefix), keys)
    agents = [agent(env, tmp_path, "ret-job", n) for n in [*nodes, spare]]
    try:
        now = time.time()
        for record in job_records("ret-job", nodes, now):
            tap.publish(record)
        time.sleep(4)
        tap.publish(hw("ret-job", "rn2", now))
        run_act(env, 1)
        journal = Journal(tmp_path / "act" / "journal.sqlite")
        journal.request_node_return("rn2")  # its self-check passed: back to the pool at act's next poll
        journal.close()
        tap.publish(hw("ret-job", "rn4", time.time()))
        run_act(env, 1)
        wait_plans(tap, 2)
    finally:
        stop_all(agents, timeout_s=30)
        tap.drain(1.0)
        tap.close()
    restarts = [r for r in tap.seen if isinstance(r, ActionCommand) and r.action == "restart_from_checkpoint"]
    assert [r.nodes for r in restarts] == [["rn1", "rs0", "rn3", "rn4"], ["rn1", "rs0", "rn3", "rn2"]]
    answered = {(r.command_id, r.node) for r in tap.seen if isinstance(r, ActionResult) and r.status == "ok"}
    assert {(restarts[1].id, n) for n in ["rn1", "rs0", "rn3", "rn2"]} <= answered
    assert restarts[1].params.standby == {"rs0": "rn2", "rn2": "rn4"}
