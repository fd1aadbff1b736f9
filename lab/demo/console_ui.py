"""The demo's operator console: `trainguard ui` started beside act, with fresh tokens.

`trainguard demo --console` calls `start_console`: it writes a credentials
file with a random operator and viewer token into the run directory, starts
the console as one more process of the demo stack, and returns its URL once
it listens, so the demo can print where to look and how to sign in.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from trainguard.lab.demo.stack import DemoStack
from trainguard.streams.console.auth import digest, new_token


@dataclass(frozen=True)
class ConsoleAccess:
    """Where the demo's console listens and the tokens that open it."""

    url: str
    operator_token: str
    viewer_token: str


def start_console(stack: DemoStack, config_args: list[str], run_dir: Path, port: int,
                  timeout_s: float = 60.0) -> ConsoleAccess:
    """Start `trainguard ui` in the demo stack; wait for its URL."""
    operator, viewer = new_token(), new_token()
    users = run_dir / "console-users.yaml"
    users.write_text(yaml.safe_dump({"users": [
        {"name": "demo-operator", "role": "operator", "token_sha256": digest(operator)},
        {"name": "demo-viewer", "role": "viewer", "token_sha256": digest(viewer)}]}))
    users.chmod(0o600)
    proc = stack.start("console", *config_args, "ui", "--port", str(port), "--credentials", str(users))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in proc.log.read_text(errors="replace").splitlines():
            if "console at " in line:
                return ConsoleAccess(line.split("console at ")[1].split()[0], operator, viewer)
        if proc.proc.poll() is not None:
            break
        time.sleep(0.3)
    raise RuntimeError(f"the console did not start; see {proc.log}")
