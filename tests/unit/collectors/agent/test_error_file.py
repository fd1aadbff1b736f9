"""The agent and torchrun's error files, with real child processes (torch's own `@record`).

A child decorated with torchelastic's `@record` writes its exception to
$TORCHELASTIC_ERROR_FILE; the agent sets that per attempt and reads it when
the child dies, so the root cause is known even when stderr said nothing.
A child that dies before its first step saying nothing at all is flagged so.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fakes import ListSink

from trainguard.collectors.agent.error_file import ERROR_FILE_ENV, SILENT_STARTUP
from trainguard.collectors.agent.node_agent import Agent
from trainguard.detectors.logs import classify
from trainguard.schemas.records import LogEvent
from trainguard.schemas.signing import KeyRing

RING = KeyRing({"act": Ed25519PrivateKey.generate().public_key()})
RECORDED = """
import os, sys
from torch.distributed.elastic.multiprocessing.errors import record
@record
def main():
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)  # stderr lost: only the error file knows
    raise RuntimeError("Error(s) in loading state_dict for Linear: size mismatch for weight")
main()
"""


def run(tmp_path: Path, code: str) -> tuple[Agent, ListSink]:
    sink = ListSink()
    agent = Agent(job="j", node="n1", argv=[sys.executable, "-c", code], sink=sink, command_keys=RING,
                  state_dir=tmp_path / "state", tee=lambda line, stream: None)
    agent.start()
    deadline = time.monotonic() + 60
    while agent.check_exit() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert agent.exit_code is not None
    return agent, sink


def test_the_root_cause_comes_from_the_error_file_when_stderr_says_nothing(tmp_path: Path) -> None:
    agent, sink = run(tmp_path, RECORDED)
    events = sink.of(LogEvent)
    [why] = [e for e in events if e.source == "torchelastic error file"]
    assert why.message.startswith("RuntimeError: Error(s) in loading state_dict") and why.job == "j"
    assert classify(why) == ("user", "size mismatch")
    exit_event = events[-1]
    assert exit_event.category == "exit" and exit_event.exit_code == 1 and SILENT_STARTUP not in exit_event.message
    assert agent.attempt is not None and agent.attempt.path.parent == tmp_path / "state" / "errors"


def test_a_silent_death_before_any_step_is_said_to_be_one(tmp_path: Path) -> None:
    _, sink = run(tmp_path, "import sys; sys.exit(1)")
    [exit_event] = sink.of(LogEvent)
    assert exit_event.exit_code == 1 and SILENT_STARTUP in exit_event.message


def test_a_traceback_is_a_message_and_a_clean_exit_is_just_an_exit(tmp_path: Path) -> None:
    _, sink = run(tmp_path, "raise ValueError('bad config: lr must be positive')")
    assert all(SILENT_STARTUP not in e.message for e in sink.of(LogEvent))
    _, sink = run(tmp_path, "pass")
    assert [e.message for e in sink.of(LogEvent)] == ["process exited with code 0"]


def test_a_users_own_error_file_is_kept_and_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = tmp_path / "mine.json"
    monkeypatch.setenv(ERROR_FILE_ENV, str(mine))
    agent, sink = run(tmp_path, RECORDED)
    assert mine.exists() and agent.attempt is not None and agent.attempt.env() == {}
    assert [e.source for e in sink.of(LogEvent)].count("torchelastic error file") == 1
