"""From a real agent's exit events to the incident (issue 22: no silent crash), without a broker.

A real training process is SIGKILLed (what the OOM killer does: no traceback,
no error file) under a real `Agent`; what the agent publishes, fed to a
`DetectionPipeline` with the user_error detector and the correlator, must
open one incident of unknown cause. The same agent stopped and restarted by
act's commands must open none: those exits are marked as commanded.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fakes import ListSink

from trainguard.collectors.agent.node_agent import Agent
from trainguard.detectors.logs import UserErrorDetector
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.schemas.action_params import ActionParams, NoParams, Restart
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import ActionCommand, Heartbeat, Incident, Record
from trainguard.schemas.signing import KeyRing, Received, Signer

ACT = Signer("act", Ed25519PrivateKey.generate())
SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]
# Ignores SIGTERM, so act's stop ends in SIGKILL (-9) after the grace: only the agent's marker tells it from a crash.
STUBBORN = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "open(__import__('sys').argv[1], 'w').close(); time.sleep(60)"]


def agent(tmp_path: Path, argv: list[str] = SLEEPER) -> tuple[Agent, ListSink]:
    sink = ListSink()
    return Agent(job="j", node="n1", argv=argv, sink=sink, command_keys=KeyRing({"act": ACT.private_key.public_key()}),
                 state_dir=tmp_path / "state", grace_s=1.0, tee=lambda line, stream: None), sink


def command(i: str, action: str, params: ActionParams | None = None) -> Received:
    now = time.time()
    payload = Codec().encode(ActionCommand(ts=now, expires=now + 60, id=i, action=action, job="j",  # type: ignore[arg-type]
                                           params=params or NoParams()))
    return Received(Codec().decode(payload), payload, ACT.headers(payload))  # type: ignore[arg-type]


def incidents(records: list[Record]) -> list[Incident]:
    """Run the published records through detection, then let 60 s of event time pass."""
    pipeline = DetectionPipeline([UserErrorDetector()])
    last = max(r.ts for r in records)
    later = Heartbeat(ts=last + 60.0, job="j", rank=0, node="n1", pid=1, step=0, phase="training")
    return [i for r in [*records, later] for i in pipeline.process(r)[1]]


def wait_ready(flag: Path) -> None:
    """Until the (restarted) child ignores SIGTERM; consumes the flag for the next start."""
    deadline = time.monotonic() + 30.0
    while not flag.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert flag.exists(), "the child never started"
    flag.unlink()


def wait_for_exit(a: Agent) -> int:
    deadline = time.monotonic() + 30.0
    while (code := a.check_exit()) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert code is not None, "the child never exited"
    return code


def test_a_real_training_process_killed_by_sigkill_is_one_incident_of_unknown_cause(tmp_path: Path) -> None:
    a, sink = agent(tmp_path)
    pid = a.start()
    os.kill(pid, signal.SIGKILL)
    assert wait_for_exit(a) == -9
    [incident] = incidents(sink.records)
    assert (incident.kind, incident.nodes, incident.evidence["cause"]) == ("user_error", ["n1"], "unknown")
    assert incident.evidence["exit_codes"] == {"n1": -9}


def test_a_real_process_act_restarts_then_stops_raises_no_incident(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    a, sink = agent(tmp_path, [*STUBBORN, str(ready)])
    a.start()
    try:
        wait_ready(ready)
        assert a.handle(command("r1", "restart_from_checkpoint", Restart())).status == "ok"  # type: ignore[union-attr]
        wait_ready(ready)
        assert a.handle(command("s1", "stop")).status == "ok"  # type: ignore[union-attr]
    finally:
        a.proc.stop(grace_s=1.0)
    codes = [getattr(e, "exit_code", None) for e in sink.records if getattr(e, "category", "") == "exit"]
    assert codes == [-9, -9], codes  # killed each time: not a SIGTERM, only the marker says act did it
    assert incidents(sink.records) == []
