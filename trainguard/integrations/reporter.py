"""What both framework callbacks share: the monitor, the every-step checkpoints, and the resume.

A callback knows its framework's hooks; this object knows trainguard: it
builds the `TrainingMonitor` (unless the user passed one), starts a
`CheckpointManager` on the model and the *torch* optimizer once the
framework has created it, restores the newest copy when the agent restarted
the job (`TRAINGUARD_RESUME_STEP`), and turns the framework's own step
counter (which restarts at 0 in a new process) into trainguard's, which
continues from the restored step.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger(__name__)

Tokens = int | Callable[[Any], int] | None


def torch_optimizer(optimizer: Any) -> Any:
    """The torch optimizer under a framework's wrapper (accelerate's `AcceleratedOptimizer`, Lightning's)."""
    while hasattr(optimizer, "optimizer") and not hasattr(optimizer, "register_step_pre_hook"):
        optimizer = optimizer.optimizer
    inner = getattr(optimizer, "optimizer", None)
    return inner if inner is not None and hasattr(inner, "register_step_pre_hook") else optimizer


def grad_norm(model: Any) -> float | None:
    """The global L2 norm of the model's gradients (None before any backward)."""
    import torch

    norms = [torch.linalg.vector_norm(p.grad.detach()) for p in model.parameters() if p.grad is not None]
    if not norms:
        return None
    return float(torch.linalg.vector_norm(torch.stack(norms)))


def count_tokens(tokens: Tokens, batch: Any) -> int:
    """Tokens in one batch: a constant, a function of the batch, or 0 (then no MFU)."""
    if tokens is None:
        return 0
    return int(tokens(batch)) if callable(tokens) else int(tokens)


class Reporter:
    """The trainguard side of a framework callback."""

    def __init__(self, *, job: str, monitor: Any = None, checkpoint: Any = True, tp: int = 1, pp: int = 1,
                 peak_flops: float | None = None, flops_per_token: float | None = None,
                 env: Mapping[str, str] | None = None, **monitor_kw: Any) -> None:
        self.job = job
        self.env = os.environ if env is None else env
        self.tp, self.pp = tp, pp
        self.checkpoint = checkpoint  # True, False, or a CheckpointConfig
        self.monitor = monitor
        self._owns_monitor = monitor is None
        self._monitor_kw = {"peak_flops": peak_flops, "flops_per_token": flops_per_token, **monitor_kw}
        self.manager: Any = None
        self.guard: Any = None
        self.offset = 0  # the step the run resumed after
        self.restored: Any = None
        self.last_saved: str = ""

    def start(self, model: Any, optimizer: Any) -> int:
        """Build what is missing, restore after a restart; the step training resumes after (0: fresh)."""
        import trainguard
        from trainguard.checkpoint.guard import TrainingGuard

        if self.monitor is None:
            self.monitor = trainguard.TrainingMonitor(job=self.job, model=model, tp=self.tp, pp=self.pp,
                                                      env=self.env, **self._monitor_kw)
        if self.checkpoint is not False and optimizer is not None:
            from trainguard.checkpoint import CheckpointConfig, CheckpointManager

            config = self.checkpoint if isinstance(self.checkpoint, CheckpointConfig) else None
            self.manager = CheckpointManager(job=self.job, model=model, optimizer=torch_optimizer(optimizer),
                                             config=config, tp=self.tp, pp=self.pp, publisher=self.monitor)
        self.guard = TrainingGuard(self.monitor, self.manager) if self.manager is not None else None
        resume = int(self.env.get("TRAINGUARD_RESUME_STEP", "0") or 0)
        if resume and self.manager is not None:
            self.restored = self.manager.restore(before=resume + 1)
            if self.restored is None:
                log.warning("trainguard: no copy at or before step %s to resume from; starting fresh", resume)
        self.offset = self.restored.step if self.restored is not None else 0
        self.monitor.current_step = self.offset
        return self.offset

    def step(self, framework_step: int, *, loss: float, grad: float | None, tokens: int) -> None:
        """Report (and snapshot) one optimizer step, numbered on trainguard's timeline."""
        step = self.offset + framework_step
        if self.guard is not None:
            self.guard.step(step, loss=loss, tokens=tokens, grad_norm=grad)
        elif self.monitor is not None:
            self.monitor.step(loss=loss, tokens=tokens, grad_norm=grad, step=step)

    def saved(self, framework_step: int, path: str, *, status: str = "saved") -> None:
        """Announce a checkpoint the framework wrote (its own, beside trainguard's tiers)."""
        if self.monitor is not None and path and (status != "saved" or path != self.last_saved):
            self.monitor.checkpoint_saved(self.offset + framework_step, path, status=status)
            self.last_saved = path if status == "saved" else self.last_saved

    def close(self) -> None:
        """Stop the checkpoint threads and, if we built it, the monitor (which delivers what is queued)."""
        if self.manager is not None:
            self.manager.close()
        if self.monitor is not None and self._owns_monitor:
            self.monitor.close()


def as_float(value: Any) -> float | None:
    """A loss as a float (NaN kept: it is the finding), or None when it is not a number."""
    if value is None:
        return None
    try:
        return float(value.detach()) if hasattr(value, "detach") else float(value)
    except (TypeError, ValueError, RuntimeError):
        return None
