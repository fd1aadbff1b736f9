"""In-process restart: recover inside the surviving processes instead of relaunching them.

The design follows NVIDIA nvidia-resiliency-ext's `inprocess.Wrapper`: the
training function runs inside a wrapper; a restartable fault unwinds it to
the wrapper, which tears the process group down, re-creates it under a new
store prefix (so no message of the failed iteration can reach the new one),
restores the state, and calls the function again. What a process restart
pays (interpreter and torch import, CUDA context, rendezvous from scratch,
reading a checkpoint) is skipped: the wrapper keeps the interpreter, the
store connection and, through the checkpoint manager, the state in memory.

Restartable: a NaN or loss spike (roll back one step), an SDC rollback, a
hot update (the new code is re-imported by the training function), and a
collective that failed because a peer was evicted (the replacement joins
the new iteration with the evicted rank's number and pulls its shard from
the peer backup). Not restartable: anything that leaves this process
unsound (a CUDA error poisons the context), which is re-raised for the agent
to handle with a process restart.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")
LATEST_KEY = "tg-inprocess/latest"


class RestartRequested(Exception):
    """Raised inside the training function to roll back and continue in-process."""

    def __init__(self, reason: str, *, bad_step: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.bad_step = bad_step


@dataclass
class RestartContext:
    """What the training function learns about the iteration it runs in."""

    iteration: int
    restored_step: int | None = None
    restored_tier: str | None = None
    fault_at: float | None = None  # perf_counter() when the last fault was caught
    history: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class InProcessRestart(Generic[T]):
    """Run `train(ctx)`; on a restartable fault re-create the process group, restore, and run it again.

    `store` is the job's c10d store (a TCPStore every rank reaches); each
    iteration gets `PrefixStore("tg-inprocess/<i>/", store)`. `restore(bad_step)`
    loads the newest state before the bad step and returns (step, tier); the
    checkpoint manager's `restore` is meant here.
    """

    store: Any
    rank: int
    world_size: int
    restore: Callable[[int | None], tuple[int | None, str | None]]
    backend: str = "gloo"
    max_restarts: int = 3
    timeout_s: float = 60.0
    restartable: tuple[type[BaseException], ...] = (RestartRequested, RuntimeError)
    join: bool = False  # a replacement joining the survivors' next iteration

    def run(self, train: Callable[[RestartContext], T]) -> T:
        import torch.distributed as dist

        ctx = RestartContext(iteration=0)
        if self.join:  # wait for the survivors to announce the iteration they re-form the group in
            ctx.iteration = int(self.store.get(LATEST_KEY))
            ctx.fault_at = time.perf_counter()
            ctx.history.append({"iteration": ctx.iteration, "reason": "joined as a replacement", "bad_step": None})
        while True:
            if ctx.iteration > 0:
                self.store.set(LATEST_KEY, str(ctx.iteration))
            dist.init_process_group(self.backend, store=dist.PrefixStore(f"tg-inprocess/{ctx.iteration}/", self.store),
                                    rank=self.rank, world_size=self.world_size,
                                    timeout=timedelta(seconds=self.timeout_s))
            if ctx.fault_at is not None:
                bad = ctx.history[-1].get("bad_step")
                ctx.restored_step, ctx.restored_tier = self.restore(bad)
                ctx.history[-1].update(restored_step=ctx.restored_step, tier=ctx.restored_tier,
                                       reinit_s=time.perf_counter() - ctx.fault_at)
            try:
                return train(ctx)
            except self.restartable as exc:
                if ctx.iteration >= self.max_restarts or _cuda_poisoned(exc):
                    raise
                ctx.fault_at = time.perf_counter()
                bad_step = exc.bad_step if isinstance(exc, RestartRequested) else None
                ctx.history.append({"iteration": ctx.iteration, "reason": str(exc)[:200], "bad_step": bad_step})
                log.warning("in-process restart %d after: %s", ctx.iteration + 1, exc)
            finally:
                _teardown()
            ctx.iteration += 1


def _teardown() -> None:
    """Drop the process group (its sockets close, so peers blocked in a collective fail fast)."""
    import gc

    import torch.distributed as dist

    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception as exc:  # a half-dead group may fail to shut down cleanly; it is gone either way
            log.debug("destroy_process_group: %s", exc)
    gc.collect()


def _cuda_poisoned(exc: BaseException) -> bool:
    """A CUDA error leaves the context unusable: only a fresh process recovers."""
    text = str(exc)
    return "CUDA error" in text or "device-side assert" in text
