"""Start, follow and stop one training command (the agent's child), and find its processes.

The command runs in its own session (process group), so stopping it reaches
every process a launcher such as torchrun spawned: SIGTERM to the group,
then SIGKILL after a grace period. Its stdout and stderr are pumped line by
line by two threads into a callback, which the agent uses to tee them to its
own stdout and to feed the log parser.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


class ProcessSupervisor:
    """One child command at a time; restartable with a different environment."""

    def __init__(self, *, argv: Sequence[str], on_line: Callable[[str, str], None]) -> None:
        if not argv:
            raise ValueError("no command to run: give it after `--`")
        self.argv = list(argv)
        self._on_line = on_line
        self._proc: subprocess.Popen[bytes] | None = None
        self._pumps: list[threading.Thread] = []

    @property
    def pid(self) -> int | None:
        """The child's pid while it runs."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def start(self, env: Mapping[str, str]) -> int:
        """Start the command with `env` added to the agent's environment; returns the pid."""
        if self.pid is not None:
            raise RuntimeError("the training process is already running")
        self._proc = subprocess.Popen(self.argv, env={**without_keys(os.environ), **env}, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True)
        self._pumps = [threading.Thread(target=self._pump, args=(stream, name), daemon=True, name=f"pump-{name}")
                       for stream, name in ((self._proc.stdout, "stdout"), (self._proc.stderr, "stderr"))]
        for pump in self._pumps:
            pump.start()
        return self._proc.pid

    def poll(self) -> int | None:
        """The exit code once the child has exited (and its output is drained), else None."""
        if self._proc is None or self._proc.poll() is None:
            return None
        for pump in self._pumps:
            pump.join(timeout=5)
        return self._proc.returncode

    def stop(self, *, grace_s: float) -> int | None:
        """SIGTERM the process group, SIGKILL it after `grace_s`; returns the exit code."""
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            _signal_group(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
        return self.poll()

    def process_tree(self) -> list[int]:
        """The child's pid and all its descendants (e.g. torchrun's workers)."""
        root = self.pid
        return [] if root is None else descendants(root)

    def _pump(self, stream: object, name: str) -> None:
        assert hasattr(stream, "readline")
        for raw in iter(stream.readline, b""):  # type: ignore[attr-defined]
            self._on_line(raw.decode(errors="replace").rstrip("\n"), name)


def descendants(root: int, proc: Path = Path("/proc")) -> list[int]:
    """`root` and every process below it, from /proc/<pid>/stat parent links."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def env_of(pid: int, name: str, proc: Path = Path("/proc")) -> str | None:
    """One variable of another process's environment (None if unreadable)."""
    try:
        raw = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    for item in raw.split(b"\0"):
        key, _, value = item.partition(b"=")
        if key.decode(errors="replace") == name:
            return value.decode(errors="replace")
    return None


def without_keys(env: Mapping[str, str]) -> dict[str, str]:
    """The agent's environment minus anything naming its signing keys: training code never sees them.

    >>> without_keys({"PATH": "/bin", "TRAINGUARD_SECURITY__NODE_PRIVATE_KEY": "/k", "TRAINGUARD_JOB": "j"})
    {'PATH': '/bin', 'TRAINGUARD_JOB': 'j'}
    """
    return {k: v for k, v in env.items() if not k.upper().startswith(SECRET_ENV_PREFIXES)}


# The second prefix is the pre-Ed25519 shared HMAC key's variable: no setting reads it now, but an old
# deployment may still set it, and a secret must not reach the training process either way.
SECRET_ENV_PREFIXES = ("TRAINGUARD_SECURITY__", "TRAINGUARD_ACTIONS__HMAC")


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass  # already gone

