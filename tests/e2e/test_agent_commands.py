"""`trainguard run` end to end: a real torch training process, the real broker, signed commands.

The agent runs as a real subprocess supervising a real (small, CPU) torch
training script instrumented with `trainguard.TrainingMonitor`. Commands are
signed with a test act key (Ed25519, headers over the exact bytes) and produced to the real `<prefix>actions`
topic; results, audit entries, steps and stacks are read back from Kafka.
`trainguard selfcheck` belongs to another area, so the self-check command is
configured to a stand-in script that prints the JSON object it would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from kafka import KafkaConsumer, KafkaProducer

from trainguard.schemas.action_params import DumpStacks, Restart
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import (
    ActionCommand,
    ActionResult,
    AuditEntry,
    Heartbeat,
    LogEvent,
    Record,
    StackSample,
    TrainingStep,
)
from trainguard.schemas.signing import Signer, load_signer
from trainguard.schemas.topics import Topics

pytestmark = [pytest.mark.broker, pytest.mark.e2e]
SCRIPT = Path(__file__).parent / "agent_train_script.py"
FAKE_SELFCHECK = ["python3", "-c", "import json,sys; c=json.loads(sys.argv[2]); "
                  "print(json.dumps({'checked': c['id'], 'healthy': True}))"]


class Bus:
    """Produces commands and collects every record the agent and the job publish."""

    def __init__(self, servers: str, topics: Topics, act: Signer) -> None:
        self.topics = topics
        self.act = act
        self.codec = Codec()
        self.producer = KafkaProducer(bootstrap_servers=servers)
        self.consumer = KafkaConsumer(*[topics.name(t) for t in ("training", "checkpoints", "logs", "action-results",
                                                                 "audit")],
                                      bootstrap_servers=servers, auto_offset_reset="earliest", group_id=None,
                                      metadata_max_age_ms=1000)
        self.seen: list[Record] = []

    def send(self, cmd: ActionCommand, signer: Signer | None = None) -> ActionCommand:
        value = self.codec.encode(cmd)
        self.producer.send(self.topics.name("actions"), key=cmd.job.encode(), value=value,
                           headers=(signer or self.act).headers(value))
        self.producer.flush()
        return cmd

    def wait(self, pred: Callable[[Record], bool], timeout_s: float = 120.0) -> Record:
        """The first record (seen so far or arriving) that satisfies `pred`."""
        deadline = time.monotonic() + timeout_s
        while True:
            for r in self.seen:
                if pred(r):
                    return r
            if time.monotonic() > deadline:
                raise AssertionError(f"no matching record within {timeout_s}s; saw {len(self.seen)}")
            for batch in self.consumer.poll(timeout_ms=500).values():
                self.seen.extend(self.codec.decode(m.value) for m in batch)

    def result(self, command_id: str, timeout_s: float = 120.0) -> ActionResult:
        r = self.wait(lambda r: isinstance(r, ActionResult) and r.command_id == command_id, timeout_s)
        assert isinstance(r, ActionResult)
        return r

    def close(self) -> None:
        self.producer.close()
        self.consumer.close()


@pytest.fixture
def bus(kafka: str, topic_prefix: str, keys: Any) -> Iterator[Bus]:
    keys.node("node-1")
    b = Bus(kafka, Topics(topic_prefix), load_signer(keys.root / "act.key"))
    b.security = keys.security()  # type: ignore[attr-defined]
    yield b
    b.close()


def start_agent(kafka: str, prefix: str, tmp: Path, *, job: str, extra_env: dict[str, str] | None = None,
                linger_s: float = 30.0, security: dict[str, Any]) -> subprocess.Popen[str]:
    (tmp / "ckpt").mkdir(exist_ok=True)
    env = {**os.environ, "TRAINGUARD_BROKER__BOOTSTRAP": kafka, "TRAINGUARD_TOPICS__PREFIX": prefix,
           "TRAINGUARD_SECURITY__NODE_PRIVATE_KEY": security["node_private_key"],
           "TRAINGUARD_SECURITY__ACT_PUBLIC_KEYS": json.dumps(security["act_public_keys"]),
           "TRAINGUARD_COLLECTORS__SPOOL_DIR": str(tmp / "spool"),
           "TRAINGUARD_COLLECTORS__AGENT__STATE_DIR": str(tmp / "agent"),
           "TRAINGUARD_COLLECTORS__AGENT__GRACE_S": "5",
           "TRAINGUARD_COLLECTORS__AGENT__SELFCHECK_COMMAND": json.dumps(FAKE_SELFCHECK),
           "JOB": job, "CKPT_DIR": str(tmp / "ckpt"), **(extra_env or {})}
    return subprocess.Popen([sys.executable, "-m", "trainguard.cli", "run", "--job", job, "--node", "node-1",
                             "--linger", str(linger_s), "--", sys.executable, str(SCRIPT)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _cmd(i: str, action: str, job: str, **kw: Any) -> ActionCommand:
    now = time.time()
    return ActionCommand(ts=now, expires=now + 120, id=i, action=action, job=job, **kw)  # type: ignore[arg-type]


def _step(job: str, *, min_step: int = 0, attempt: int = 0, code_version: str = "") -> Callable[[Record], bool]:
    return lambda r: (isinstance(r, TrainingStep) and r.job == job and r.step >= min_step
                      and r.attempt == attempt and r.code_version == code_version)


def test_agent_obeys_signed_commands_once(kafka: str, topic_prefix: str, tmp_path: Path, bus: Bus) -> None:
    job = "e2e-job"
    agent = start_agent(kafka, topic_prefix, tmp_path, job=job, security=bus.security)
    try:
        bus.wait(_step(job, min_step=6))  # training runs and has saved step5.pt

        forged = bus.send(_cmd("c-forged", "stop", job), signer=Signer("act", Ed25519PrivateKey.generate()))
        assert bus.result(forged.id).status == "rejected"
        audit = bus.wait(lambda r: isinstance(r, AuditEntry) and r.subject_id == "c-forged")
        assert isinstance(audit, AuditEntry) and audit.event == "command_rejected"
        expired = bus.send(ActionCommand(ts=time.time() - 300, expires=time.time() - 200, id="c-expired",
                                         action="stop", job=job))
        audit = bus.wait(lambda r: isinstance(r, AuditEntry) and r.subject_id == expired.id)
        assert isinstance(audit, AuditEntry) and "expired" in audit.detail["reason"]

        bus.send(_cmd("c-other-node", "stop", job, nodes=["node-9"]))  # not ours: ignored
        ckpt = str(tmp_path / "ckpt" / "step5.pt")
        restart = bus.send(_cmd("c-restart", "restart_from_checkpoint", job, params=Restart(step=5, path=ckpt)))
        result = bus.result(restart.id)
        assert result.status == "ok" and result.node == "node-1", result
        assert result.details["TRAINGUARD_RESUME_STEP"] == "5" and result.details["TRAINGUARD_ATTEMPT"] == "1"
        resumed = bus.wait(_step(job, attempt=1))
        assert isinstance(resumed, TrainingStep) and resumed.step == 6  # continued from the checkpoint

        bus.send(restart)  # redelivered: must not restart again
        assert bus.result(restart.id).status == "ok"
        bus.wait(lambda r: isinstance(r, ActionResult) and r.command_id == restart.id and r.status == "skipped")

        update = bus.send(_cmd("c-hot", "hot_update", job, params=Restart(code_version="v2")))
        assert bus.result(update.id).status == "ok"
        bus.wait(_step(job, attempt=2, code_version="v2"))

        check = bus.send(_cmd("c-check", "self_check", job))
        checked = bus.result(check.id)
        assert checked.status == "ok" and checked.details == {"checked": "c-check", "healthy": True}

        stop = bus.send(_cmd("c-stop", "stop", job, nodes=["node-1"]))
        assert bus.result(stop.id).status == "ok"
        exit_event = bus.wait(lambda r: isinstance(r, LogEvent) and r.category == "exit")
        assert isinstance(exit_event, LogEvent) and exit_event.exit_code is not None
        assert not any(isinstance(r, ActionResult) and r.command_id == "c-other-node" for r in bus.seen)
    finally:
        agent.send_signal(signal.SIGTERM)
        out, _ = agent.communicate(timeout=60)
    assert "attempt=1 code_version=None resume_step=5 start=5" in out  # the tee of the child's output
    assert "attempt=2 code_version=v2" in out


def test_agent_dumps_stacks_of_a_hung_process_and_remembers_commands_across_restart(
        kafka: str, topic_prefix: str, tmp_path: Path, bus: Bus) -> None:
    job = "e2e-hang"
    hang_env = {"HANG_AT_STEP": "3", "TRAINGUARD_COLLECTORS__AGENT__HANG_SUSPECT_S": "2",
                "TRAINGUARD_COLLECTORS__AGENT__HANG_STACK_EVERY_S": "1"}
    agent = start_agent(kafka, topic_prefix, tmp_path, job=job, extra_env=hang_env,
                        security=bus.security)
    try:
        bus.wait(_step(job, min_step=3))
        # Without any command, the agent's hang watch samples the stuck process by itself.
        suspected = bus.wait(lambda r: isinstance(r, StackSample) and r.reason.startswith("suspected hang: step 3")
                             and any("hang_in_fake_collective" in f for f in r.frames))
        assert isinstance(suspected, StackSample)
        dump = bus.send(_cmd("c-dump", "dump_stacks", job, params=DumpStacks(repeat=2, interval_s=0.5)))
        assert bus.result(dump.id).status == "ok"
        stack = bus.wait(lambda r: isinstance(r, StackSample) and any("hang_in_fake_collective" in f for f in r.frames))
        assert isinstance(stack, StackSample) and stack.job == job and stack.node == "node-1" and stack.pid > 0
        assert stack.frames[-1].startswith("hang_in_fake_collective") and stack.frames[-2].startswith("main")
        periodic = bus.wait(lambda r: isinstance(r, StackSample) and "periodic 2" in r.reason
                            and any("hang_in_fake_collective" in f for f in r.frames))
        assert periodic.ts >= stack.ts
        # The heartbeat thread beats on while the loop is stuck, and the beats show no progress.
        late = bus.wait(lambda r: isinstance(r, Heartbeat) and r.job == job and r.ts > periodic.ts)
        assert isinstance(late, Heartbeat) and late.step == 3
        assert max(r.step for r in bus.seen if isinstance(r, TrainingStep) and r.job == job) == 3
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.communicate(timeout=60)
    # A new agent with the same state dir: the replayed command id is skipped, not executed.
    agent = start_agent(kafka, topic_prefix, tmp_path, job=job, extra_env={"HANG_AT_STEP": "3"},
                        security=bus.security)
    try:
        bus.send(dump)
        bus.wait(lambda r: isinstance(r, ActionResult) and r.command_id == dump.id and r.status == "skipped")
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.communicate(timeout=60)


def test_failure_is_reported_with_traceback_and_exit_code(kafka: str, topic_prefix: str, tmp_path: Path,
                                                         bus: Bus) -> None:
    job = "e2e-fail"
    agent = start_agent(kafka, topic_prefix, tmp_path, job=job, extra_env={"FAIL_AT_STEP": "2"}, linger_s=0,
                        security=bus.security)
    out, _ = agent.communicate(timeout=120)
    assert agent.returncode == 1, out
    tb = bus.wait(lambda r: isinstance(r, LogEvent) and r.category == "traceback")
    assert isinstance(tb, LogEvent) and tb.message == "RuntimeError: CUDA error: an illegal memory access was encountered"
    code = bus.wait(lambda r: isinstance(r, LogEvent) and r.category == "exit")
    assert isinstance(code, LogEvent) and code.exit_code == 1 and code.job == job
