"""One rank of a small DDP job under the checkpoint manager and in-process restart (a test helper).

Each rank is a real torch process; its "machine" is its own RAM directory
(`--mem`), which the test deletes to simulate losing the machine. The c10d
store lives in the test process, as torchrun's agent would host it.
Writes a JSON report of what happened to `--out`.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from trainguard.checkpoint.config import CheckpointConfig
from trainguard.checkpoint.inprocess import InProcessRestart, RestartContext, RestartRequested
from trainguard.checkpoint.manager import CheckpointManager


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(16, 32, generator=gen)
    return x, x[:, :4].sum(dim=1, keepdim=True).sin()


def main() -> None:
    a = _args()
    host, port = a.store.rsplit(":", 1)
    store = dist.TCPStore(host, int(port), a.world, is_master=False, timeout=timedelta(seconds=60))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    cfg = CheckpointConfig(memory_dir=a.mem, memory_slots=3)
    holder: dict[str, Any] = {}
    report: dict[str, Any] = {"rank": a.rank, "steps": []}
    nan_fired = Path(a.mem) / "nan-fired"

    def restore(bad_step: int | None) -> tuple[int | None, str | None]:
        if "mgr" in holder:
            holder["mgr"].reconnect()
        else:
            holder["mgr"] = CheckpointManager(job="t", model=model, optimizer=opt, config=cfg, node=a.node)
        got = holder["mgr"].restore(before=bad_step)
        report.setdefault("restores", []).append(None if got is None else {
            "step": got.step, "tier": got.tier, "rejected": got.rejected})
        return (got.step, got.tier) if got else (None, None)

    def train(ctx: RestartContext) -> None:
        mgr = holder.setdefault("mgr", None) or CheckpointManager(job="t", model=model, optimizer=opt, config=cfg,
                                                                 node=a.node)
        holder["mgr"] = mgr
        ddp = nn.parallel.DistributedDataParallel(model)
        start = (ctx.restored_step or 0) + 1
        for step in range(start, a.steps + 1):
            x, y = batch(step, a.rank)
            loss = nn.functional.mse_loss(ddp(x), y)
            if step == a.nan_at and a.rank == 1 and not nan_fired.exists():
                nan_fired.touch()
                loss = loss * math.nan
            opt.zero_grad()
            loss.backward()
            norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9))
            opt.step()
            if ctx.fault_at is not None and not report.get("first_new_step_s"):
                report["first_new_step_s"] = time.perf_counter() - ctx.fault_at
            report["steps"].append(step)
            mgr.step(step, loss=loss.item(), grad_norm=norm)
            if mgr.first_bad_step is not None:
                raise RestartRequested("non-finite", bad_step=mgr.first_bad_step)
            time.sleep(a.compute_s)
        mgr.wait_copy()

    wrapper: InProcessRestart[None] = InProcessRestart(store=store, rank=a.rank, world_size=a.world,
                                                      restore=restore, timeout_s=30, join=a.join)
    ctx_history: list[dict[str, Any]] = []

    def run(ctx: RestartContext) -> None:
        ctx_history[:] = ctx.history  # the same list the wrapper appends to
        train(ctx)

    wrapper.run(run)
    report["history"] = ctx_history
    report["final"] = [p.detach().double().sum().item() for p in model.parameters()]
    Path(a.out).write_text(json.dumps(report))
    holder["mgr"].close()


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--store", required=True)
    p.add_argument("--mem", required=True)
    p.add_argument("--node", required=True)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--nan-at", type=int, default=0)
    p.add_argument("--compute-s", type=float, default=0.05)
    p.add_argument("--join", action="store_true")
    p.add_argument("--out", required=True)
    return p.parse_args()


if __name__ == "__main__":
    main()
