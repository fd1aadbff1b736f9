"""A stop-time self-check fans out through the machines' own agents.

Real parts: the real broker, a real `trainguard act --executor local`, and
three real `trainguard run` agents on this host, each with its own node
name and node key, each supervising a stand-in trainer. A hang incident
with no suspect (the job's topology known) makes act stop-time diagnose
the three machines. Each agent must receive its own signed command and
start only its own machine's check rank (torch, gloo on CPU); the ranks
meet over TCP at the rendezvous act assigned. Every rank records its pid
and parent, so the test can check that each rank's parent is the
`trainguard selfcheck` process of its own machine's agent.

Faults are injected per machine with TRAINGUARD_SELFCHECK_FAULT in that
machine's agent only (`n2:bitflip` flips one ulp of its reference step);
a silent machine is an agent stopped with SIGSTOP before the check.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from processes import free_port

from tests.e2e.act_kit import Tap
from trainguard.actions.journal import Journal
from trainguard.schemas.records import ActionCommand, ActionResult, AuditEntry, CheckpointEvent, Incident, JobTopology
from trainguard.schemas.topics import Topics

pytestmark = [pytest.mark.broker, pytest.mark.e2e]
TRAINER = Path(__file__).parent / "stubborn_trainer.py"
NODES = ["n1", "n2", "n3"]
JOB = "fanout-job"


def trainguard(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "trainguard.cli", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def diagnose(kafka: str, topic_prefix: str, tmp_path: Path, keys: Any, *, faults: dict[str, str] | None = None,
             silent: str = "", timeout_s: float = 60.0, kind: str = "hang") -> tuple[Tap, dict[str, int], Journal]:
    """Run the whole hang plan; returns what was seen, each agent's pid, and act's journal."""
    keys.node(*NODES)
    topics = Topics(topic_prefix)
    tap = Tap(kafka, topics, keys)
    base = {**os.environ, "TRAINGUARD_BROKER__BOOTSTRAP": kafka, "TRAINGUARD_TOPICS__PREFIX": topic_prefix,
            "TRAINGUARD_TOPICS__PARTITIONS": "2", **keys.env(), "PYTHONUNBUFFERED": "1", "STOP_S": "1",
            "TRAINGUARD_ACTIONS__GROUP_ID": f"a-{topic_prefix}", "TRAINGUARD_ACTIONS__STATE_DIR": str(tmp_path / "act"),
            "TRAINGUARD_ACTIONS__COMMAND_TIMEOUT_S": str(timeout_s),
            "TRAINGUARD_ACTIONS__SELFCHECK__RENDEZVOUS_HOST": "127.0.0.1",
            "TRAINGUARD_ACTIONS__SELFCHECK__RENDEZVOUS_PORT": str(free_port()),
            "TRAINGUARD_ACTIONS__SELFCHECK__RENDEZVOUS_PORTS": "1",
            "TRAINGUARD_ACTIONS__SELFCHECK__PROCS_PER_MACHINE": "1",
            "TRAINGUARD_ACTIONS__SELFCHECK__COLLECTIVE_TIMEOUT_S": "5",
            "TRAINGUARD_COLLECTORS__AGENT__GRACE_S": "5", "TRAINGUARD_COLLECTORS__AGENT__STACK_TIMEOUT_S": "2",
            "TRAINGUARD_COLLECTORS__AGENT__SELFCHECK_COMMAND": json.dumps(
                [sys.executable, "-m", "trainguard.cli", "selfcheck"])}
    base.pop("TRAINGUARD_SELFCHECK_FAULT", None)
    agents = {node: trainguard({**base, "TRAINGUARD_COLLECTORS__AGENT__STATE_DIR": str(tmp_path / node),
                           "TRAINGUARD_COLLECTORS__SPOOL_DIR": str(tmp_path / f"spool-{node}"),
                           **({"TRAINGUARD_SELFCHECK_FAULT": faults[node]} if node in (faults or {}) else {})},
                          "run", "--job", JOB, "--node", node, "--linger", "300", "--", sys.executable, str(TRAINER))
              for node in NODES}
    act: subprocess.Popen[str] | None = None
    try:
        if silent:
            agents[silent].send_signal(signal.SIGSTOP)  # hung: alive, never answers
        now = time.time()
        tap.publish(JobTopology(ts=now, job=JOB, world_size=3, rank_nodes=dict(enumerate(NODES))))
        tap.publish(CheckpointEvent(ts=now, job=JOB, step=100, path="/ck/100"))
        tap.publish(Incident(ts=now + 1, id=f"{kind}-{topic_prefix}", kind=kind, job=JOB, onset=now,  # type: ignore[arg-type]
                             detected_at=now + 1, step=120 if kind == "sdc" else None))
        act = trainguard(base, "act", "--executor", "local", "--timeout", "600")
        tap.wait(lambda r: isinstance(r, AuditEntry) and r.event.startswith("decision_") and r.event != "decision",
                 timeout_s=timeout_s * 6)
        tap.drain(2.0)
    finally:
        if silent:
            agents[silent].send_signal(signal.SIGCONT)
        for proc in [*([act] if act else []), *agents.values()]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in [*([act] if act else []), *agents.values()]:
            proc.communicate(timeout=90)
        tap.close()
    return tap, {n: p.pid for n, p in agents.items()}, Journal(tmp_path / "act" / "journal.sqlite")


def checks_sent(tap: Tap) -> list[ActionCommand]:
    return [r for r in tap.seen if isinstance(r, ActionCommand) and r.action == "self_check"]


def agent_reports(tap: Tap) -> dict[str, dict[str, Any]]:
    ids = {c.id for c in checks_sent(tap)}
    return {r.node: r.details["machine_report"] for r in tap.seen
            if isinstance(r, ActionResult) and r.command_id in ids and "machine_report" in r.details}


def check_step(journal: Journal, topic_prefix: str) -> ActionResult:
    decision = journal.decision_for(f"hang-{topic_prefix}")
    assert decision is not None and decision.rule == "hang.stop_time_diagnosis", decision
    step = journal.steps(decision.id)[1]
    assert step.action == "self_check"
    return step


def assert_each_agent_ran_only_its_own_ranks(tap: Tap, pids: dict[str, int], nodes: list[str]) -> None:
    sent = checks_sent(tap)
    assert sorted(c.nodes[0] for c in sent) == sorted(NODES) and all(len(c.nodes) == 1 for c in sent)
    assert len({c.params.check_id for c in sent}) == 1 and len({c.id for c in sent}) == 3
    reports = agent_reports(tap)
    assert sorted(reports) == sorted(nodes)
    rank_pids = []
    for node in nodes:
        report = reports[node]
        assert report["agent_pid"] == pids[node]  # run by this machine's agent
        assert report["node_rank"] == NODES.index(node)
        records = [r for rs in report["stages"].values() for r in rs]
        assert records and {r["machine"] for r in records} == {node}
        assert {r["rank"] for r in records} == {NODES.index(node)}  # its own global rank only
        assert {r["parent"] for r in records} == {report["pid"]}  # started by this agent's selfcheck
        rank_pids += sorted({r["pid"] for r in records})
    assert len(set(rank_pids)) == len(nodes)


def test_healthy_machines_pass_each_running_only_its_own_ranks(kafka: str, topic_prefix: str, tmp_path: Path,
                                                                 keys: Any) -> None:
    tap, pids, journal = diagnose(kafka, topic_prefix, tmp_path, keys)
    step = check_step(journal, topic_prefix)
    assert step.status == "ok" and step.details["passed"] is True, step
    assert [(s["name"], s["status"]) for s in step.details["stages"]] == [
        ("dcgm", "unavailable"), ("all_to_all", "passed"), ("all_gather", "passed"), ("bitwise", "passed")]
    assert_each_agent_ran_only_its_own_ranks(tap, pids, NODES)
    assert not [r for r in tap.seen if isinstance(r, ActionCommand) and r.action == "stop"]  # nobody evicted


# A hung rank (one per machine here) finishes its all-to-all long after the others: rank 0, which
# referees the early stop, names its machine after 1.5 collective timeouts of quiet and every rank
# stops there; act takes that call although the late record arrives after all.
@pytest.mark.parametrize(("fault", "stage"), [("bitflip", "bitwise"), ("hang", "all_to_all")])
def test_a_fault_on_one_machine_is_named_and_only_that_machine_evicted(fault: str, stage: str, kafka: str,
                                                                       topic_prefix: str, tmp_path: Path,
                                                                       keys: Any) -> None:
    tap, pids, journal = diagnose(kafka, topic_prefix, tmp_path, keys, faults={"n2": f"n2:{fault}"})
    step = check_step(journal, topic_prefix)
    assert step.status == "failed" and step.details["stage"] == stage and step.details["culprits"] == ["n2"]
    assert_each_agent_ran_only_its_own_ranks(tap, pids, NODES)
    stops = [r for r in tap.seen if isinstance(r, ActionCommand) and r.action == "stop"]
    assert stops and all(s.nodes == ["n2"] for s in stops)
    if fault == "hang":  # every machine stopped after the stage that named n2: no later stage ran
        reports = agent_reports(tap)
        assert {r.get("stopped_after") for r in reports.values()} == {"all_to_all"}
        assert all(r["stages"]["bitwise"] == [] for r in reports.values())
    restarts = [r for r in tap.seen if isinstance(r, ActionCommand) and r.action == "restart_from_checkpoint"]
    assert restarts and all(sorted(r.nodes) == ["n1", "n3"] for r in restarts)


def test_a_silent_agent_is_named_not_passed(kafka: str, topic_prefix: str, tmp_path: Path, keys: Any) -> None:
    tap, pids, journal = diagnose(kafka, topic_prefix, tmp_path, keys, silent="n3", timeout_s=30.0)
    step = check_step(journal, topic_prefix)
    assert step.status == "failed" and step.details["stage"] == "agents" and step.details["culprits"] == ["n3"]
    assert step.details["silent"] == ["n3"]
    assert_each_agent_ran_only_its_own_ranks(tap, pids, ["n1", "n2"])
    missing: set[int] = set()
    for node, report in agent_reports(tap).items():  # the others waited at the rendezvous for n3's rank
        records = [r for rs in report["stages"].values() for r in rs]
        assert records and all(r["rendezvous_failed"] for r in records), node
        missing |= {m for r in records for m in r["missing_ranks"] or []}  # None: rank 0's store went first
    assert missing == {2}
    stops = [r for r in tap.seen if isinstance(r, ActionCommand) and r.action == "stop"]
    assert stops and all(s.nodes == ["n3"] for s in stops)  # the eviction goes to the silent machine only


def test_sdc_replay_phases_fan_out_and_meet_on_the_corrupt_machine(kafka: str, topic_prefix: str, tmp_path: Path,
                                                                  keys: Any) -> None:
    tap, pids, journal = diagnose(kafka, topic_prefix, tmp_path, keys, faults={"n2": "n2:bitflip"}, kind="sdc")
    decision = journal.decision_for(f"sdc-{topic_prefix}")
    assert decision is not None and decision.rule == "sdc.dual_phase_replay"
    steps = journal.steps(decision.id)
    phases = [s for s in steps if s.action == "replay_regroup"]
    # 3 machines: rows [n1 n2] [n3], columns [n1 n3] [n2]; n2 is in row 0 and column 1.
    assert [p.details["failed_groups"] for p in phases] == [[0], [1]]
    sent = [r for r in tap.seen if isinstance(r, ActionCommand) and r.action == "replay_regroup"]
    assert len(sent) == 6 and all(len(c.nodes) == 1 for c in sent)  # one command per machine per phase
    ids = {c.id: c.nodes[0] for c in sent}
    answers = [r for r in tap.seen if isinstance(r, ActionResult) and r.command_id in ids]
    assert answers and all(r.node == ids[r.command_id] for r in answers)
    for r in answers:
        report = r.details["machine_report"]
        assert report["agent_pid"] == pids[r.node]
        assert {rec["parent"] for rec in report["stages"]["replay"]} == {report["pid"]}
    evicts = [r for r in tap.seen if isinstance(r, ActionCommand) and r.action == "stop" and r.nodes == ["n2"]]
    assert evicts  # the evict step stops n2 (after the plan's first stop of every machine)
