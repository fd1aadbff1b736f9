"""Python stacks of training processes, as `StackSample`s (frames outermost first).

Two ways to get them, both parsed by pure functions tested on literal text:

* py-spy (`py-spy dump --pid`), when installed: works even if the process
  never imported the hook, but needs ptrace rights.
* The hook's faulthandler signal: `SIGUSR1` makes the process itself write
  every thread's stack to `<stack_dir>/<pid>.txt`; we read what was appended.

The hang detector relies on seeing where each rank is stuck (which
collective, which line), so a sample per thread is published and the
`reason` says which thread it was.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

_FH_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)(?: \[(?P<name>[^\]]*)\])? \(most recent call first\):")
_FH_FRAME = re.compile(r'^\s+File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<func>.+)$')
_SPY_THREAD = re.compile(r'^Thread (?P<id>0x[0-9A-Fa-f]+|\d+) \((?P<state>[^)]*)\)(?:: "(?P<name>[^"]*)")?')
_SPY_FRAME = re.compile(r"^\s+(?P<func>\S+) \((?P<file>[^:)]+):(?P<line>\d+)\)")


@dataclass(frozen=True)
class ThreadStack:
    """One thread's stack; `frames` outermost first, `func (file:line)`."""

    thread: str
    frames: list[str]
    current: bool = False


def parse_faulthandler(text: str) -> list[ThreadStack]:
    """Parse a faulthandler dump (innermost first in the text) into outermost-first stacks.

    >>> dump = '''Thread 0x00007f01 (most recent call first):
    ...   File "/x/train.py", line 9 in all_reduce
    ...   File "/x/train.py", line 20 in <module>
    ... '''
    >>> parse_faulthandler(dump)[0].frames
    ['<module> (/x/train.py:20)', 'all_reduce (/x/train.py:9)']
    """
    stacks: list[ThreadStack] = []
    for line in text.splitlines():
        head = _FH_THREAD.match(line)
        if head:
            name = head.group("name") or head.group(2)
            stacks.append(ThreadStack(thread=name, frames=[], current=head.group(1) == "Current thread"))
            continue
        frame = _FH_FRAME.match(line)
        if frame and stacks:
            stacks[-1].frames.insert(0, f"{frame['func']} ({frame['file']}:{frame['line']})")
    return stacks


def parse_py_spy(text: str) -> list[ThreadStack]:
    """Parse `py-spy dump` output (innermost first) into outermost-first stacks."""
    stacks: list[ThreadStack] = []
    for line in text.splitlines():
        head = _SPY_THREAD.match(line)
        if head:
            stacks.append(ThreadStack(thread=head.group("name") or head.group("id"), frames=[]))
            continue
        frame = _SPY_FRAME.match(line)
        if frame and stacks:
            stacks[-1].frames.insert(0, f"{frame['func']} ({frame['file']}:{frame['line']})")
    return stacks


class StackSampler:
    """Samples stacks of a pid with py-spy if available, else the hook's SIGUSR1 dump."""

    def __init__(self, *, stack_dir: Path, timeout_s: float = 5.0, use_py_spy: bool | None = None) -> None:
        self.stack_dir = stack_dir
        self.timeout_s = timeout_s
        self.py_spy = shutil.which("py-spy") if use_py_spy is not False else None

    def sample(self, pid: int) -> list[ThreadStack]:
        """Stacks of every thread of `pid`; [] when neither method produced any."""
        if self.py_spy:
            try:
                out = subprocess.run([self.py_spy, "dump", "--pid", str(pid)], capture_output=True, text=True,
                                     timeout=self.timeout_s)
                if out.returncode == 0:
                    return parse_py_spy(out.stdout)
            except subprocess.TimeoutExpired:
                pass  # fall back to the signal
        return self._via_signal(pid)

    def _via_signal(self, pid: int) -> list[ThreadStack]:
        if not catches_signal(pid, signal.SIGUSR1):
            return []  # the default action of SIGUSR1 is to terminate: never send it blindly
        path = self.stack_dir / f"{pid}.txt"
        before = path.stat().st_size if path.exists() else 0
        try:
            os.kill(pid, signal.SIGUSR1)
        except ProcessLookupError:
            return []
        deadline = time.monotonic() + self.timeout_s
        last_size = before
        while time.monotonic() < deadline:
            time.sleep(0.1)
            size = path.stat().st_size if path.exists() else 0
            if size > before and size == last_size:
                break  # the dump grew and has stopped growing
            last_size = size
        if not path.exists():
            return []
        with path.open("r", errors="replace") as f:
            f.seek(before)
            return parse_faulthandler(f.read())


def catches_signal(pid: int, signum: int, proc: Path = Path("/proc")) -> bool:
    """True when `pid` has a handler for `signum` (the `SigCgt` mask in /proc/<pid>/status)."""
    try:
        status = (proc / str(pid) / "status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False
