"""The agent's command handling without a broker: real child processes, records into a list.

The Kafka side is covered by tests/e2e/test_agent_commands.py; here the
decisions are checked one by one: addressing, signatures, expiry, replays,
idempotency across an agent restart, parameter validation, and that no key
reaches the training process's environment.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fakes import ListSink

from trainguard.collectors.agent.node_agent import Agent
from trainguard.schemas.action_params import Restart
from trainguard.schemas.codec import Codec, DecodeError
from trainguard.schemas.records import ActionCommand, ActionResult, AttemptKey, AuditEntry, LogEvent
from trainguard.schemas.signing import KeyRing, Received, Signer, attempt_key_id, load_signer, public_from_b64

ACT = Signer("act", Ed25519PrivateKey.generate())
EVIL = Signer("act", Ed25519PrivateKey.generate())  # claims act's key id, holds another key
RING = KeyRing({"act": ACT.private_key.public_key()})
SLEEPER = [sys.executable, "-c", "import time, os; print('pid', os.getpid(), flush=True); time.sleep(60)"]



@pytest.fixture
def make_agent(tmp_path: Path):  # type: ignore[no-untyped-def]
    agents: list[Agent] = []

    def make(argv: list[str] = SLEEPER, **kw: object) -> tuple[Agent, ListSink]:
        sink = ListSink()
        agent = Agent(job="j", node="n1", argv=argv, sink=sink, command_keys=RING, state_dir=tmp_path / "state",
                      grace_s=2.0, tee=lambda line, stream: None, **kw)  # type: ignore[arg-type]
        agents.append(agent)
        return agent, sink

    yield make
    for agent in agents:
        agent.proc.stop(grace_s=1.0)


def signed(command: ActionCommand, signer: Signer | None = ACT) -> Received:
    payload = Codec().encode(command)
    return Received(command, payload, signer.headers(payload) if signer else [])


def cmd(i: str, action: str, signer: Signer | None = ACT, **kw: object) -> Received:
    now = time.time()
    command = ActionCommand(ts=now, expires=now + 60, id=i, action=action, job=kw.pop("job", "j"),  # type: ignore[arg-type]
                            **kw)  # type: ignore[arg-type]
    return signed(command, signer)


def test_addressing(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent, sink = make_agent()
    assert agent.handle(cmd("a", "stop", job="other")) is None
    assert agent.handle(cmd("b", "stop", nodes=["n2"])) is None
    assert agent.handle(cmd("c", "evict_node", nodes=["n1"])) is None  # for the executor, not the agent
    assert sink.records == []


def test_bad_signature_is_rejected_audited_and_not_remembered(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent, sink = make_agent()
    agent.start()
    result = agent.handle(cmd("x", "stop", signer=EVIL))
    assert result is not None and result.status == "rejected"
    audit = [r for r in sink.records if isinstance(r, AuditEntry)]
    assert audit[0].event == "command_rejected" and audit[0].subject_id == "x"
    assert "does not verify" in audit[0].detail["reason"]
    assert agent.proc.pid is not None  # still running
    assert agent.handle(cmd("x", "stop", signer=None)).status == "rejected"  # type: ignore[union-attr]
    other_kid = Signer("act-2", ACT.private_key)  # right key, id this agent was not given
    assert agent.handle(cmd("x", "stop", signer=other_kid)).status == "rejected"  # type: ignore[union-attr]
    assert agent.handle(cmd("x", "stop")).status == "ok"  # type: ignore[union-attr]  # the real one still runs


def test_signature_covers_the_bytes_sent_not_a_re_encoding(make_agent) -> None:  # type: ignore[no-untyped-def]
    """A producer in another language writes `ts` as an integer: the bytes it signed still verify."""
    agent, _ = make_agent()
    now = int(time.time())
    payload = json.dumps({"type": "action_command", "ts": now, "expires": now + 60, "id": "int-ts",
                          "action": "dump_stacks", "job": "j", "params": {"kind": "dump_stacks", "repeat": 1}}).encode()
    command = Codec().decode(payload, ActionCommand)
    result = agent.handle(Received(command, payload, ACT.headers(payload)))
    assert result is not None and result.status != "rejected"
    tampered = payload.replace(b'"repeat": 1', b'"repeat": 2')
    result = agent.handle(Received(Codec().decode(tampered, ActionCommand), tampered, ACT.headers(payload)))
    assert result is not None and result.status == "rejected"


def test_rotation_accepts_every_configured_key(make_agent, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    new = Signer("act-2027", Ed25519PrivateKey.generate())
    sink = ListSink()
    agent = Agent(job="j", node="n1", argv=SLEEPER, sink=sink, state_dir=tmp_path / "rot", tee=lambda *a: None,
                  command_keys=KeyRing({"act": ACT.private_key.public_key(), "act-2027": new.private_key.public_key()}))
    for i, signer in enumerate((ACT, new)):
        result = agent.handle(cmd(f"d{i}", "dump_stacks", signer=signer))
        assert result is not None and result.status != "rejected"


def test_idempotent_across_agent_restart_and_attempt_persists(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent, sink = make_agent()
    agent.start()
    restart = cmd("r1", "restart_from_checkpoint", params=Restart(step=40, path="/ckpt/40"))
    first = agent.handle(restart)
    assert first is not None and first.status == "ok" and first.details["TRAINGUARD_ATTEMPT"] == "1"
    assert agent.handle(restart).status == "skipped"  # type: ignore[union-attr]
    agent.proc.stop(grace_s=1.0)
    again, _ = make_agent()  # same state dir: a restarted agent
    assert again.state.attempt == 1 and again.state.resume_step == 40
    assert again.state.child_env()["TRAINGUARD_RESUME_PATH"] == "/ckpt/40"
    assert again.handle(restart).status == "skipped"  # type: ignore[union-attr]


def test_expired_and_future_commands_are_refused_and_audited(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent, sink = make_agent()
    now = time.time()
    old = signed(ActionCommand(ts=now - 180, expires=now - 60, id="old", action="stop", job="j"))
    assert agent.handle(old) is None
    future = signed(ActionCommand(ts=now + 600, expires=now + 660, id="fut", action="stop", job="j"))
    assert agent.handle(future) is None
    no_expiry = signed(ActionCommand(ts=now, id="noexp", action="stop", job="j"))
    assert agent.handle(no_expiry) is None
    audits = [r for r in sink.records if isinstance(r, AuditEntry)]
    assert [(a.subject_id, a.event) for a in audits] == [("old", "command_rejected"), ("fut", "command_rejected"),
                                                         ("noexp", "command_rejected")]
    assert "expired" in audits[0].detail["reason"] and "future" in audits[1].detail["reason"]
    assert agent.proc.pid is None  # nothing was started, nothing stopped


def test_replayed_command_id_is_audited(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent, sink = make_agent()
    agent.start()
    first = cmd("rp", "dump_stacks")
    agent.handle(first)
    assert agent.handle(first).status == "skipped"  # type: ignore[union-attr]
    replays = [r for r in sink.records if isinstance(r, AuditEntry) and r.event == "command_rejected"]
    assert [r.detail["reason"] for r in replays] == ["replayed command id"]


def test_training_process_never_sees_key_settings(make_agent, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                                  tmp_path: Path) -> None:
    monkeypatch.setenv("TRAINGUARD_SECURITY__NODE_PRIVATE_KEY", "/keys/n1.key")
    monkeypatch.setenv("TRAINGUARD_SECURITY__ACT_PUBLIC_KEYS", '["/keys/act.pub"]')
    out = tmp_path / "env.json"
    agent, _ = make_agent([sys.executable, "-c", f"import json, os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))"])
    agent.start()
    while agent.check_exit() is None:
        time.sleep(0.05)
    env = json.loads(out.read_text())
    assert "TRAINGUARD_ATTEMPT" in env  # the agent's own variables do arrive
    assert not [k for k in env if k.startswith("TRAINGUARD_SECURITY")]


def test_bad_params_fail_clearly(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent, _ = make_agent()
    agent.start()
    no_version = agent.handle(cmd("h", "hot_update", params=Restart()))
    assert no_version is not None and no_version.status == "failed" and "code_version" in no_version.message
    now = time.time()  # a mistyped step never becomes a command: the agent's feed dead-letters what fails to decode
    bad_step = {"type": "action_command", "ts": now, "expires": now + 60, "id": "s", "action": "restart_from_checkpoint",
                "job": "j", "params": {"kind": "restart", "step": "ten"}}
    with pytest.raises(DecodeError, match=r"\$\.params\.step"):
        Codec().decode(json.dumps(bad_step).encode())


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
    result = agent.handle(cmd("g1", "restart_from_checkpoint", params=Restart(step=40, path="/c/40", attempt=6)))
    assert result is not None and result.details["TRAINGUARD_ATTEMPT"] == "6"
    agent.handle(cmd("g2", "restart_from_checkpoint", params=Restart(step=40, path="/c/40")))
    assert agent.state.attempt == 7  # without a generation: its own count goes on
    agent.proc.stop(grace_s=1.0)


def test_from_settings_builds_the_agent_trainguard_run_starts(tmp_path: Path, keys) -> None:  # type: ignore[no-untyped-def]
    """Its sink is a spooling Publisher signing as this node, its feed reads the actions topic, its state
    sits in collectors.agent.state_dir; nothing needs a broker (nothing listens on the port here)."""
    from trainguard.collectors.agent.command_feed import BackgroundFeed
    from trainguard.collectors.publisher import Publisher
    from trainguard.settings import load_settings

    keys.node("n1")
    settings = load_settings(None, broker={"port": 1}, security=keys.security(),
                             collectors={"spool_dir": str(tmp_path / "spool"),
                                         "agent": {"state_dir": str(tmp_path / "state"), "grace_s": 3.0}})
    agent = Agent.from_settings(settings, job="j", node="n1", argv=["true"], tee=lambda line, stream: None)
    try:
        assert isinstance(agent.sink, Publisher) and isinstance(agent.feed, BackgroundFeed)
        assert agent.grace_s == 3.0 and (tmp_path / "state" / "j-n1.json").is_file()
    finally:
        agent.close()


def test_from_settings_refuses_without_this_nodes_key(tmp_path: Path, keys) -> None:  # type: ignore[no-untyped-def]
    from trainguard.schemas.signing import KeyFileError
    from trainguard.settings import load_settings

    settings = load_settings(None, security=keys.security(), collectors={"agent": {"state_dir": str(tmp_path)}})
    with pytest.raises(KeyFileError, match="no-such-node"):
        Agent.from_settings(settings, job="j", node="no-such-node", argv=["true"], tee=lambda line, stream: None)
    assert not list(tmp_path.iterdir())  # refused before any state was written


def test_every_command_received_and_its_answer_is_logged(make_agent, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    """An unanswered command must be diagnosable from the agent's log alone: did it arrive, what came of it."""
    agent, _ = make_agent()
    agent.start()
    with caplog.at_level("INFO", logger="trainguard.collectors.agent.node_agent"):
        agent.handle(cmd("forged", "stop", signer=EVIL))
        agent.handle(cmd("real", "stop"))
    lines = [r.getMessage() for r in caplog.records]
    assert any("forged stop received" in line for line in lines)
    assert any("forged rejected" in line for line in lines)
    assert any("real stop received" in line for line in lines)
    assert any(line.startswith("command real stop: ok") for line in lines)


def test_an_exit_act_commanded_says_so_and_a_crash_does_not(make_agent) -> None:  # type: ignore[no-untyped-def]
    """The detectors tell act's own stops from crashes by this marker (issue 22: every crash is an incident)."""
    agent, sink = make_agent()
    agent.start()
    agent.handle(cmd("r1", "restart_from_checkpoint", params=Restart(step=4, path="/c/4")))
    agent.handle(cmd("s1", "stop"))
    exits = [e for e in sink.records if isinstance(e, LogEvent) and e.category == "exit"]
    assert [e.message.endswith(f"(stopped by command {a})") for e, a in zip(exits, ("restart", "stop"))] == [True] * 2
    assert all(e.exit_code not in (0, None) for e in exits)
    crasher, crash_sink = make_agent([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    crasher.start()
    while crasher.check_exit() is None:
        time.sleep(0.05)
    [death] = [e for e in crash_sink.records if isinstance(e, LogEvent) and e.category == "exit"]
    assert death.exit_code == -9 and "stopped by command" not in death.message


def test_each_start_mints_an_attempt_key_handed_over_as_a_0600_file_and_announced(make_agent,  # type: ignore[no-untyped-def]
                                                                                  tmp_path: Path) -> None:
    """The private half reaches the training process as a path only; the public half goes out in an
    AttemptKey (node-signed by the agent's publisher); a restart mints a new one and deletes the old file."""
    out = tmp_path / "env.json"
    dump = [sys.executable, "-c", f"import json, os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))"]
    agent, sink = make_agent(dump)
    agent.start()
    while agent.check_exit() is None:
        time.sleep(0.05)
    env = json.loads(out.read_text())
    key_file = Path(env["TRAINGUARD_ATTEMPT_KEY_FILE"])
    assert (key_file.stat().st_mode & 0o777, key_file.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    assert not [k for k, v in env.items() if "PRIVATE KEY" in v]  # a path, never key material
    announced, = [r for r in sink.records if isinstance(r, AttemptKey)]
    assert (announced.job, announced.attempt, announced.node) == ("j", 0, "n1")
    assert announced.key_id == env["TRAINGUARD_ATTEMPT_KEY_ID"] == attempt_key_id("j", 0, "n1", announced.key_id[-16:])
    signer = load_signer(key_file, env["TRAINGUARD_ATTEMPT_KEY_ID"])
    ring = KeyRing({announced.key_id: public_from_b64(announced.public_key)})
    assert ring.check(b"checkpoint", signer.headers(b"checkpoint")) == (announced.key_id, "")

    result = agent.handle(cmd("r", "restart_from_checkpoint", params=Restart(step=1, path="/c/1", attempt=6)))
    assert result is not None and result.status == "ok"
    while agent.check_exit() is None:
        time.sleep(0.05)
    second = [r for r in sink.records if isinstance(r, AttemptKey)][-1]
    assert second.attempt == 6 and second.public_key != announced.public_key
    assert not key_file.exists()  # the previous attempt's key died with it
    current = Path(json.loads(out.read_text())["TRAINGUARD_ATTEMPT_KEY_FILE"])
    assert current.exists()
    agent.close()
    assert not current.exists()
