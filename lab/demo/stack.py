"""Start and stop the demo's processes: worker, action consumer, node agents.

Every process is a real `trainguard` subcommand started with the demo's
environment (its own topic prefix, state directories and detector config),
its output written to a log file in the run directory, and all of them are
stopped on exit, agents first so training processes die with them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType


@dataclass
class DemoProcess:
    """One background process and its log file."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path


@dataclass
class DemoStack:
    """The demo's processes, started in order and stopped in reverse."""

    run_dir: Path
    env: dict[str, str]
    procs: list[DemoProcess] = field(default_factory=list)

    def start(self, name: str, *args: str, extra_env: dict[str, str] | None = None) -> DemoProcess:
        """Start `trainguard ARGS...` in its own session, logging to run_dir/NAME.log."""
        log = self.run_dir / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "trainguard.cli", *args],
                env={**self.env, **(extra_env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.run_dir,
                start_new_session=True,
            )
        entry = DemoProcess(name, proc, log)
        self.procs.append(entry)
        return entry

    def alive(self, name: str) -> bool:
        return any(p.name == name and p.proc.poll() is None for p in self.procs)

    def stop_all(self, timeout_s: float = 15.0) -> None:
        """SIGTERM every process group, then SIGKILL whatever is left after `timeout_s` in all."""
        for entry in reversed(self.procs):
            _signal_group(entry.proc, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for entry in reversed(self.procs):
            try:
                entry.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for entry in self.procs:
            _signal_group(entry.proc, signal.SIGKILL)
            entry.proc.wait()

    def __enter__(self) -> DemoStack:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop_all()


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
