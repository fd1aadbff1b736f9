"""The fault switchboard shared by the demo orchestrator and the training ranks.

The orchestrator arms one fault at a time by writing a small JSON file; each
rank polls it once per step (one `stat`), fires a fault addressed to it once
per fault id, and the orchestrator disarms it as soon as trainguard reports
the incident, so the restarted job runs clean. Keeping injection in a file,
not in code, is what lets the same training script run healthy or faulty.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

FAULT_KINDS = ("nan", "hang", "slow", "bitflip", "xid79", "bad_code")


@dataclass(frozen=True)
class Fault:
    """One armed fault: what, where (rank or node), and its parameters."""

    id: str
    kind: str
    rank: int = -1
    node: str = ""
    slow_s: float = 0.0

    def targets(self, rank: int, node: str) -> bool:
        """Whether the rank running on `node` is the one to misbehave."""
        return (self.rank < 0 or self.rank == rank) and (not self.node or self.node == node)


class FaultBoard:
    """Arm, read and disarm the current fault (atomic file replace)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mtime = -1.0
        self._current: Fault | None = None

    def arm(self, fault: Fault) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(fault)))
        os.replace(tmp, self.path)

    def disarm(self) -> None:
        self.path.unlink(missing_ok=True)

    def current(self) -> Fault | None:
        """The armed fault, re-read only when the file changed."""
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            self._mtime, self._current = -1.0, None
            return None
        if mtime != self._mtime:
            self._mtime = mtime
            try:
                self._current = Fault(**json.loads(self.path.read_text()))
            except (ValueError, TypeError):
                self._current = None
        return self._current


def final_step(path: Path | None) -> int | None:
    """The step the orchestrator wants training to stop at (None while unset)."""
    if path is None:
        return None
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
