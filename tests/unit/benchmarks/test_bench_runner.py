"""`python -m benchmarks`: names select benchmarks, options after one name reach it."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from benchmarks import __main__ as runner


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    commands: list[list[str]] = []

    def fake_run(cmd: list[str], **_: Any) -> subprocess.CompletedProcess[bytes]:
        commands.append(cmd[2:])  # after the interpreter and -m
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(runner.subprocess, "run", fake_run)
    return commands


def test_options_after_one_name_are_passed_to_that_benchmark(ran: list[list[str]]) -> None:
    assert runner.main(["pipeline", "--compare-backpressure", "--latency-s", "0"]) == 0
    assert ran == [["benchmarks.bench_pipeline", "--compare-backpressure", "--latency-s", "0"]]


def test_names_alone_run_each_benchmark_without_options(ran: list[list[str]]) -> None:
    assert runner.main(["codec", "pipeline"]) == 0
    assert ran == [["benchmarks.bench_codec"], ["benchmarks.bench_pipeline"]]


def test_options_without_exactly_one_benchmark_are_refused(ran: list[list[str]],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.main(["codec", "pipeline", "--events", "10"]) == 2
    assert runner.main(["--events", "10"]) == 2
    assert ran == [] and "exactly one benchmark" in capsys.readouterr().err
