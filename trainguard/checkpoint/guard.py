"""One object to call per step: the training monitor and the checkpoint manager together.

    guard = TrainingGuard(monitor, manager)
    ...
    guard.step(step, loss=loss.item(), tokens=n, grad_norm=norm)

It publishes the step, snapshots the state, and, when `restart_on_nonfinite`
is set (inside `InProcessRestart`), turns the first non-finite loss into a
`RestartRequested` so the job rolls back one step in-process instead of
training on garbage until a detector and an operator notice.
"""

from __future__ import annotations

from typing import Any

from trainguard.checkpoint.inprocess import RestartRequested


class TrainingGuard:
    """`TrainingMonitor.step` + `CheckpointManager.step` in one call."""

    def __init__(self, monitor: Any, manager: Any, *, restart_on_nonfinite: bool = False) -> None:
        self.monitor = monitor
        self.manager = manager
        self.restart_on_nonfinite = restart_on_nonfinite

    def step(self, step: int, *, loss: float, tokens: int = 0, grad_norm: float | None = None,
             compute_time_s: float | None = None) -> bool:
        """Publish and snapshot step `step`; True if a snapshot was taken."""
        if self.monitor is not None:
            self.monitor.step(loss=loss, tokens=tokens, grad_norm=grad_norm, compute_time_s=compute_time_s, step=step)
        taken = bool(self.manager.step(step, loss=loss, grad_norm=grad_norm))
        if self.restart_on_nonfinite and self.manager.first_bad_step is not None:
            raise RestartRequested(f"non-finite loss at step {self.manager.first_bad_step}",
                                   bad_step=self.manager.first_bad_step)
        return taken

    def restore(self, bad_step: int | None) -> tuple[int | None, str | None]:
        """Reload the newest copy before `bad_step` (after the process group was re-created)."""
        self.manager.reconnect()
        restored = self.manager.restore(before=bad_step)
        if restored is None:
            return None, None
        if self.monitor is not None:
            self.monitor.current_step = restored.step
        return restored.step, restored.tier
