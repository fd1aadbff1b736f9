"""Fast recovery: every-step tiered checkpoints, peer backup, restore from the best copy, in-process restart.

Nothing heavy is imported here: torch loads when a manager is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainguard.checkpoint.config import CheckpointConfig
    from trainguard.checkpoint.manager import CheckpointManager

__all__ = ["CheckpointConfig", "CheckpointManager"]


def __getattr__(name: str) -> Any:
    if name == "CheckpointManager":
        from trainguard.checkpoint.manager import CheckpointManager

        return CheckpointManager
    if name == "CheckpointConfig":
        from trainguard.checkpoint.config import CheckpointConfig

        return CheckpointConfig
    raise AttributeError(name)
