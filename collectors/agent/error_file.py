"""torchrun's own error files, and what a training process said before it died: the agent's evidence of why.

torchelastic's `@record` decorator writes the exception that killed a
process (message, stack, timestamp) as JSON to `$TORCHELASTIC_ERROR_FILE`;
torchrun gives each worker its own file and, when one dies, copies the
root cause's file into the launcher's own `$TORCHELASTIC_ERROR_FILE`. So
the agent sets that variable for the command it supervises, one file per
attempt (unless the user set it: then it reads theirs), and reads it when
the command exits non-zero. The root cause then reaches the user-error
detector even when stderr holds only torchrun's `ChildFailedError` summary
(or nothing: a redirected or lost log).

`Attempt` also remembers whether the process reached a step and whether it
said anything (a traceback, an error line, an error file). An attempt that
exits non-zero before its first step having said nothing is reported as
such (`SILENT_STARTUP` in the exit event's message): one node doing so may
be a bad machine, every node of a job doing so at once is the job's own
code or configuration (detectors.logs explains the rule).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from trainguard.collectors.agent.hang_watch import read_progress
from trainguard.collectors.logs import error_file_event
from trainguard.schemas.records import LogEvent

ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"
SILENT_STARTUP = "before its first step, saying nothing (no traceback, no error file)"
# The exit of a process act stopped or restarted says so: the detectors never count it as a crash.
COMMANDED = "stopped by command"


class Attempt:
    """One run of the supervised command: its error file and what it has shown so far."""

    def __init__(self, *, directory: Path, name: str, attempt: int, resume_step: int | None,
                 env: Mapping[str, str] | None = None) -> None:
        user = (os.environ if env is None else env).get(ERROR_FILE_ENV)
        self.path = Path(user) if user else directory / f"{name}-attempt{attempt}.json"
        self.ours = not user
        self.resume_step = resume_step or 0
        self.said_why = False
        if self.ours:
            directory.mkdir(parents=True, exist_ok=True)
            self.path.unlink(missing_ok=True)  # a file left by an earlier run of this attempt is not this death

    def env(self) -> dict[str, str]:
        """What the command is started with (nothing when the user chose the file)."""
        return {ERROR_FILE_ENV: str(self.path)} if self.ours else {}

    def heard(self, event: LogEvent) -> None:
        """Note an event the process's output produced (a traceback or an error line is a reason)."""
        if event.level == "error":
            self.said_why = True

    def error_event(self, *, node: str, job: str, ts: float) -> LogEvent | None:
        """What `@record` wrote to the error file, as a traceback event (None: no file, or not one)."""
        try:
            text = self.path.read_text()
        except OSError:
            return None
        event = error_file_event(text, node=node, source="torchelastic error file", ts=ts, job=job)
        if event is not None:
            self.said_why = True
        return event

    def reached_a_step(self, progress_dir: Path) -> bool:
        """Whether any process of this attempt reported a step beyond the one it resumed from."""
        return any(step > self.resume_step for step, _ in read_progress(progress_dir).values())
