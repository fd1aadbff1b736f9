"""The agent's durable memory: which commands it executed, and how the job was last started.

Kafka delivers at least once, and a decision may be replayed; a restart
command executed twice would throw away progress. So every command id the
agent accepted is written here *before* it is carried out (at most once,
even if the agent dies mid-way), together with the restart count and the
code version and resume point the training process was last given, which
a restarted agent must keep using. Writes are atomic (temp file + rename).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class AgentState:
    """Everything the agent must remember across its own restarts."""

    first_started: float = 0.0
    attempt: int = 0
    code_version: str = ""
    resume_step: int | None = None
    resume_path: str | None = None
    executed: dict[str, str] = field(default_factory=dict)  # command id -> status

    def child_env(self) -> dict[str, str]:
        """The TRAINGUARD_* variables the training process is started with."""
        env = {"TRAINGUARD_ATTEMPT": str(self.attempt)}
        if self.code_version:
            env["TRAINGUARD_CODE_VERSION"] = self.code_version
        if self.resume_step is not None:
            env["TRAINGUARD_RESUME_STEP"] = str(self.resume_step)
        if self.resume_path:
            env["TRAINGUARD_RESUME_PATH"] = self.resume_path
        return env


class StateFile:
    """Loads and atomically saves an `AgentState` as JSON."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self, *, now: float, env: dict[str, str] | None = None) -> AgentState:
        """The saved state, or a fresh one seeded from the agent's environment."""
        if self.path.exists():
            try:
                data: dict[str, Any] = json.loads(self.path.read_text())
                return AgentState(**data)
            except (ValueError, TypeError) as exc:
                raise ValueError(f"agent state file {self.path} is corrupt ({exc}); "
                                 "move it away to start fresh") from None
        env = env or {}
        return AgentState(first_started=now, attempt=int(env.get("TRAINGUARD_ATTEMPT", "0") or 0),
                          code_version=env.get("TRAINGUARD_CODE_VERSION", ""))

    def save(self, state: AgentState) -> None:
        """Write the state so that a crash leaves either the old or the new file."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state), indent=1, sort_keys=True))
        os.replace(tmp, self.path)
