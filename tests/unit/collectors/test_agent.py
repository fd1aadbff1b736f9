"""The agent's command handling without a broker: real child processes, records into a list.

The Kafka side is covered by tests/e2e/test_agent_commands.py; here the
decisions are checked one by one: addressing, signatures, staleness,
idempotency across an agent restart, parameter validation.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from collectors.agent import Agent
from schemas.records import ActionCommand, ActionResult, AuditEntry, LogEvent, Record
from schemas.signing import sign

KEY = b"k"
SLEEPER = [sys.executable, "-c", "import time, os; print('pid', os.getpid(), flush=True); time.sleep(60)"]


class ListSink:
    def __init__(self) -> None:
        self.records: list[Record] = []

    def publish(self, record: Record) -> None:
        self.records.append(record)


@pytest.fixture
def make_agent(tmp_path: Path):  # type: ignore[no-untyped-def]
    agents: list[Agent] = []

    def make(argv: list[str] = SLEEPER, **kw: object) -> tuple[Agent, ListSink]:
        sink = ListSink()
        agent = Agent(job="j", node="n1", argv=argv, sink=sink, hmac_key=KEY, state_dir=tmp_path / "state",
                      grace_s=2.0, tee=lambda line, stream: None, **kw)  # type: ignore[arg-type]
        agents.append(agent)
        return agent, sink

    yield make
    for agent in agents:
        agent.proc.stop(grace_s=1.0)


def cmd(i: str, action: str, key: bytes = KEY, **kw: object) -> ActionCommand:
    return sign(ActionCommand(ts=time.time(), id=i, action=action, job=kw.pop("job", "j"), **kw), key)  # type: ignore[arg-type]


def test_addressing(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent, sink = make_agent()
    assert agent.handle(cmd("a", "stop", job="other")) is None
    assert agent.handle(cmd("b", "stop", nodes=["n2"])) is None
    assert agent.handle(cmd("c", "evict_node", nodes=["n1"])) is None  # for the executor, not the agent
    assert sink.records == []


def test_bad_signature_is_rejected_audited_and_not_remembered(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent, sink = make_agent()
    agent.start()
    forged = cmd("x", "stop", key=b"evil")
    result = agent.handle(forged)
    assert result is not None and result.status == "rejected"
    audit = [r for r in sink.records if isinstance(r, AuditEntry)]
    assert audit[0].event == "command_rejected" and audit[0].subject_id == "x"
    assert agent.proc.pid is not None  # still running
    unsigned = ActionCommand(ts=time.time(), id="x", action="stop", job="j")
    assert agent.handle(unsigned).status == "rejected"  # type: ignore[union-attr]
    assert agent.handle(cmd("x", "stop")).status == "ok"  # type: ignore[union-attr]  # the real one still runs


def test_idempotent_across_agent_restart_and_attempt_persists(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent, sink = make_agent()
    agent.start()
    restart = cmd("r1", "restart_from_checkpoint", params={"step": 40, "path": "/ckpt/40"})
    first = agent.handle(restart)
    assert first is not None and first.status == "ok" and first.details["TRAINGUARD_ATTEMPT"] == "1"
    assert agent.handle(restart).status == "skipped"  # type: ignore[union-attr]
    agent.proc.stop(grace_s=1.0)
    again, _ = make_agent()  # same state dir: a restarted agent
    assert again.state.attempt == 1 and again.state.resume_step == 40
    assert again.state.child_env()["TRAINGUARD_RESUME_PATH"] == "/ckpt/40"
    assert again.handle(restart).status == "skipped"  # type: ignore[union-attr]


def test_stale_command_from_before_the_agent_existed_is_ignored(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent, sink = make_agent()
    old = sign(ActionCommand(ts=time.time() - 3600, id="old", action="stop", job="j"), KEY)
    assert agent.handle(old) is None and sink.records == []


def test_bad_params_fail_clearly(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent, _ = make_agent()
    agent.start()
    no_version = agent.handle(cmd("h", "hot_update", params={}))
    assert no_version is not None and no_version.status == "failed" and "code_version" in no_version.message
    bad_step = agent.handle(cmd("s", "restart_from_checkpoint", params={"step": "ten"}))
    assert bad_step is not None and bad_step.status == "failed" and "params.step" in bad_step.message


def test_selfcheck_output_and_missing_command(make_agent) -> None:  # type: ignore[no-untyped-def]
    failing = [sys.executable, "-c", "import sys; print('{\"gpu\": \"bad\"}'); sys.exit(3)"]
    agent, _ = make_agent(selfcheck_command=failing)
    result = agent.handle(cmd("sc", "self_check"))
    assert result is not None and result.status == "failed" and result.details["gpu"] == "bad"
    missing, _ = make_agent(selfcheck_command=["/nonexistent/selfcheck"])
    result = missing.handle(cmd("sc2", "replay_regroup"))
    assert result is not None and result.status == "failed" and "not found" in result.message


def test_exit_is_published_once_with_its_code(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent, sink = make_agent([sys.executable, "-c", "import sys; print('NCCL WARN x'); sys.exit(7)"])
    agent.start()
    while agent.check_exit() is None:
        time.sleep(0.05)
    assert agent.check_exit() == 7
    events = [r for r in sink.records if isinstance(r, LogEvent)]
    assert [(e.category, e.exit_code) for e in events] == [("nccl", None), ("exit", 7)]
    assert not [r for r in sink.records if isinstance(r, ActionResult)]


def test_restart_adopts_the_job_generation_from_the_command(make_agent) -> None:  # type: ignore[no-untyped-def]
    """A standby that never ran joins at the job's generation, not at its own count of 1."""
    agent, _ = make_agent()
    agent.start()
    result = agent.handle(cmd("g1", "restart_from_checkpoint", params={"step": 40, "path": "/c/40", "attempt": 6}))
    assert result is not None and result.details["TRAINGUARD_ATTEMPT"] == "6"
    agent.handle(cmd("g2", "restart_from_checkpoint", params={"step": 40, "path": "/c/40"}))
    assert agent.state.attempt == 7  # without a generation: its own count goes on
    agent.proc.stop(grace_s=1.0)
