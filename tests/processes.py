"""The background processes a test starts: a free port for them, and stopping them (politely first, then for sure)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterable
from typing import Any


def stop_all(procs: Iterable[subprocess.Popen[Any]], *, timeout_s: float) -> None:
    """SIGTERM every process still running, wait up to `timeout_s` for each, SIGKILL the ones that hang on.

    `communicate` rather than `wait`: a child writing into a pipe nobody reads would never exit.
    """
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def free_port() -> int:
    """A TCP port nobody listens on now (for a process the test starts: a /metrics endpoint, a rendezvous)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
