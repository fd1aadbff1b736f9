"""Every subcommand answers bad input with one line on stderr and exit code 2, never a traceback.

Each case runs the real console entry point in a subprocess. The broker
cases point at a port nothing listens on, with a short
`broker.connect_timeout_s`, so "unreachable" is decided within seconds and
the message names the address.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from trainguard.schemas.records import TrainingStep
from trainguard.schemas.signing import generate


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again at once: nothing listens there


DEAD = _dead_port()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("cli")
    recording = root / "rec.jsonl"
    step = TrainingStep(ts=1.0, job="real-job", rank=0, node="n0", step=1, loss=1.0)
    from trainguard.streams.recording import RecordingWriter

    with open(recording, "wb") as f:
        RecordingWriter(f).write(step, key="real-job")
    generate(root / "keys", "act")
    bad_yaml = root / "bad.yaml"
    bad_yaml.write_text("broker: {bootstrapp: x}\n")
    broken_yaml = root / "broken.yaml"
    broken_yaml.write_text("broker: [unclosed\n")
    scenario = root / "scenario.yaml"
    scenario.write_text("nodes: -3\n")
    return {"rec": str(recording), "keys": str(root / "keys"), "bad_yaml": str(bad_yaml),
            "broken_yaml": str(broken_yaml), "root": str(root), "scenario": str(scenario)}


CASES: dict[str, list[str]] = {
    "no-command": [],
    "unknown-command": ["nosuch"],
    "missing-config": ["-c", "/nonexistent/tg.yaml", "schemas", "export", "{root}/s"],
    "config-typo": ["-c", "{bad_yaml}", "schemas", "export", "{root}/s"],
    "config-syntax": ["-c", "{broken_yaml}", "schemas", "export", "{root}/s"],
    "broker-bad-action": ["broker", "restart"],
    "worker-bad-flag": ["worker", "--bogus"],
    "worker-no-broker": ["worker"],
    "act-bad-number": ["act", "--max-incidents", "many"],
    "act-no-keys": ["act"],
    "act-unknown-executor": ["act", "--executor", "kubernets"],
    "act-dry-run-no-broker": ["act", "--dry-run", "--timeout", "5"],
    "actions-missing-id": ["actions", "approve"],
    "actions-missing-report": ["actions", "return-node", "n1", "--report", "/nonexistent/report.json"],
    "ettr-no-job": ["ettr"],
    "ettr-missing-recording": ["ettr", "--job", "j", "--recording", "/nonexistent/rec.jsonl"],
    "ettr-unknown-job": ["ettr", "--job", "nosuchjob", "--recording", "{rec}"],
    "ettr-no-broker": ["ettr", "--job", "j"],
    "selfcheck-bad-json": ["selfcheck", "--command-json", "{{bad"],
    "selfcheck-fanout-no-rendezvous": ["selfcheck", "--command-json",
                                       '{{"type":"action_command","id":"c","action":"self_check","job":"j",'
                                       '"params":{{"machines":["a"],"node_rank":0}},"ts":1.0}}'],
    "schemas-no-dir": ["schemas", "export"],
    "collect-bad-duration": ["collect", "--duration", "soon"],
    "run-no-command": ["run", "--job", "j"],
    "run-no-keys": ["run", "--job", "j", "--", "true"],
    "simulate-missing-scenario": ["simulate", "--scenario", "/nonexistent/s.yaml", "--out", "{root}/o.jsonl"],
    "simulate-bad-scenario": ["simulate", "--scenario", "{scenario}", "--out", "{root}/o.jsonl"],
    "record-unknown-topic": ["record", "--out", "{root}/r.jsonl", "--topics", "nosuch"],
    "record-no-broker": ["record", "--out", "{root}/r.jsonl", "--timeout", "1"],
    "replay-missing-file": ["replay", "/nonexistent/rec.jsonl"],
    "replay-no-broker": ["replay", "{rec}"],
    "backtest-missing-recording": ["backtest", "/nonexistent/rec.jsonl", "--out", "{root}/i.jsonl"],
    "backtest-eval-missing-dir": ["backtest-eval", "/nonexistent/scenarios"],
    "ettr-sim-bad-number": ["ettr-sim", "--nodes", "-4"],
    "ettr-sim-missing-trace": ["ettr-sim", "--trace", "/nonexistent/trace"],
    "detectors-bad-action": ["detectors", "forget"],
    "demo-unknown-fault": ["demo", "--faults", "nosuch"],
    "keys-no-dir": ["keys", "generate"],
    "keys-exist": ["keys", "generate", "--dir", "{keys}"],
    "keys-bad-principal": ["keys", "acls", "--principal", "nobody"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_and_exit_2(case: str, files: dict[str, str], tmp_path: Path) -> None:
    argv = [a.format(**files) for a in CASES[case]]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINGUARD_")}
    env.update({"TRAINGUARD_BROKER__PORT": str(DEAD), "TRAINGUARD_BROKER__CONNECT_TIMEOUT_S": "2",
                "TRAINGUARD_ACTIONS__STATE_DIR": str(tmp_path / "act"),
                "TRAINGUARD_COLLECTORS__AGENT__STATE_DIR": str(tmp_path / "agent"),
                "TRAINGUARD_COLLECTORS__SPOOL_DIR": str(tmp_path / "spool")})
    proc = subprocess.run([sys.executable, "-m", "trainguard.cli", *argv], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:], proc.stdout[-500:])
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("trainguard"), lines[0]
    if case.endswith("no-broker"):
        assert f"127.0.0.1:{DEAD}" in lines[0]
    if case.endswith("no-keys"):
        assert "trainguard keys generate" in lines[0]
    json.dumps(lines)  # printable
