"""One rank of the checkpoint benchmark (started by benchmarks/bench_checkpoint.py; not a benchmark itself).

Phases, all in one process so every ratio compares like with like:
overhead (uninstrumented steps interleaved with memory-tier and memory+peer
steps), backup bandwidth and restore time per tier (rank 0), today's
blocking `torch.save` checkpoint, then an in-process restart after a NaN.
With `--resume memory|file` it is instead a relaunched process timing its
way back to the first new step.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
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
from trainguard.checkpoint.peer import send_backup
from trainguard.checkpoint.store import read_slot_manifests, write_files


def build(width: int, depth: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])
    return model, torch.optim.Adam(model.parameters(), lr=1e-5)


def train_step(ddp: nn.Module, opt: torch.optim.Optimizer, step: int, rank: int, width: int, batch: int,
               nan: bool = False) -> tuple[float, float]:
    gen = torch.Generator().manual_seed(step * 100 + rank)
    x = torch.randn(batch, width, generator=gen)
    loss = ddp(x).pow(2).mean() * (math.nan if nan else 1.0)
    opt.zero_grad()
    loss.backward()
    norm = float(torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1e9))
    opt.step()
    return float(loss.item()), norm


def main() -> None:
    a = _args()
    host, port = a.store.rsplit(":", 1)
    store = dist.TCPStore(host, int(port), a.world, is_master=False, timeout=timedelta(seconds=300))
    model, opt = build(a.width, a.depth)
    cfg = CheckpointConfig(memory_dir=a.mem, disk_dir=a.disk, durable=a.durable)
    out: dict[str, Any] = {"rank": a.rank, "pid": os.getpid()}
    holder: dict[str, Any] = {}

    def manager() -> CheckpointManager:
        if "mgr" not in holder:
            holder["mgr"] = CheckpointManager(job="bench", model=model, optimizer=opt, config=cfg, node=f"n{a.rank}")
        return holder["mgr"]  # type: ignore[no-any-return]

    if a.resume:
        _resume(a, store, model, opt, manager)
        return

    def restore(bad: int | None) -> tuple[int | None, str | None]:
        manager().reconnect()
        got = manager().restore(before=bad)
        return (got.step, got.tier) if got else (None, None)

    def train(ctx: RestartContext) -> None:
        ddp = nn.parallel.DistributedDataParallel(model)
        if ctx.iteration == 0:
            mgr = manager()
            step = _overhead(a, ddp, opt, mgr, out)
            _tiers(a, mgr, out)
            step = _file_checkpoint(a, ddp, opt, model, step, out)
            train_step(ddp, opt, step + 1, a.rank, a.width, a.batch, nan=True)
            raise RestartRequested("nan", bad_step=step + 1)
        t_fault = ctx.fault_at or time.perf_counter()
        step = (ctx.restored_step or 0) + 1
        train_step(ddp, opt, step, a.rank, a.width, a.batch)
        out["inprocess"] = {"fault_to_first_step_s": time.perf_counter() - t_fault, "restored_step": ctx.restored_step,
                            "tier": ctx.restored_tier, "reinit_and_restore_s": ctx.history[-1].get("reinit_s")}
        manager().step(step)
        manager().flush()
        Path(a.out).write_text(json.dumps(out))
        while True:  # keep training until the orchestrator kills the job (a fault needing a process restart)
            step += 1
            train_step(ddp, opt, step, a.rank, a.width, a.batch)
            manager().step(step)

    wrapper: InProcessRestart[None] = InProcessRestart(store=store, rank=a.rank, world_size=a.world, restore=restore,
                                                      timeout_s=300)
    wrapper.run(train)


def _overhead(a: argparse.Namespace, ddp: nn.Module, opt: torch.optim.Optimizer, mgr: CheckpointManager,
              out: dict[str, Any]) -> int:
    """Interleaved blocks: uninstrumented, memory tier every step, memory + peer every step."""
    step = 0
    for _ in range(2):  # warm-up: the optimizer's state appears after its first step
        step += 1
        train_step(ddp, opt, step, a.rank, a.width, a.batch)
        mgr.step(step)
    mgr.flush()
    times: dict[str, list[float]] = {"base": [], "memory": [], "memory+peer": []}
    cpu: dict[str, float] = dict.fromkeys(times, 0.0)
    blocked: dict[str, float] = dict.fromkeys(times, 0.0)
    for _ in range(a.rounds):
        for mode in times:
            mgr.cfg.peer_every = 1 if mode == "memory+peer" else 10**9
            dist.barrier()
            blocked0 = mgr.stats["blocked_s"]
            for _ in range(a.block):
                step += 1
                c0, t0 = time.process_time(), time.perf_counter()
                loss, norm = train_step(ddp, opt, step, a.rank, a.width, a.batch)
                if mode != "base":
                    mgr.step(step, loss=loss, grad_norm=norm)
                times[mode].append(time.perf_counter() - t0)
                cpu[mode] += time.process_time() - c0
            blocked[mode] += mgr.stats["blocked_s"] - blocked0
            c0 = time.process_time()
            mgr.flush()  # background work of this block is charged to it, not to the next
            cpu[mode] += time.process_time() - c0
    state_bytes = sum(s.nbytes for s in mgr._layout.specs) if mgr._layout else 0
    out["overhead"] = {m: {"median_s": statistics.median(v), "mean_s": statistics.fmean(v), "steps": len(v),
                           "cpu_per_step_s": cpu[m] / len(v), "blocked_per_step_s": blocked[m] / len(v)}
                       for m, v in times.items()}
    out["state_bytes"] = state_bytes
    out["stats"] = dict(mgr.stats)
    return step


def _tiers(a: argparse.Namespace, mgr: CheckpointManager, out: dict[str, Any]) -> None:
    """Backup bandwidth and restore time per tier (rank 0; rank 1 serves its peer backup)."""
    mgr.flush()
    if a.rank == 0:
        m, path = max(read_slot_manifests(mgr.own_dir), key=lambda mp: mp[0].step)
        payload = path.read_bytes()[:m.nbytes]
        t0 = time.perf_counter()
        send_backup(mgr.addrs[mgr.peer.peer], m, payload)  # type: ignore[union-attr]
        out["backup_MBps"] = m.nbytes / (time.perf_counter() - t0) / 1e6
        write_files(a.disk, m, payload)
        write_files(a.durable, m, payload)
        restore: dict[str, float] = {}
        for tier in ("memory", "disk", "peer", "durable"):
            t0 = time.perf_counter()
            got = mgr.restore(step=m.step, tiers=(tier,), agree=False)
            restore[tier] = time.perf_counter() - t0
            assert got is not None and got.tier == tier, tier
        out["restore_s"] = restore
    dist.barrier()


def _file_checkpoint(a: argparse.Namespace, ddp: nn.Module, opt: torch.optim.Optimizer, model: nn.Module,
                     step: int, out: dict[str, Any]) -> int:
    """Today's path: a blocking torch.save of the full state by rank 0, then a barrier."""
    step += 1
    train_step(ddp, opt, step, a.rank, a.width, a.batch)
    t0 = time.perf_counter()
    if a.rank == 0:
        torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, Path(a.durable) / "ckpt.pt")
    dist.barrier()
    out["blocking_save_s"] = time.perf_counter() - t0
    return step


def _resume(a: argparse.Namespace, store: Any, model: nn.Module, opt: torch.optim.Optimizer, manager: Any) -> None:
    """A relaunched process: rendezvous, load (own memory, or today's file), run one step, report the time."""
    dist.init_process_group("gloo", store=dist.PrefixStore(f"resume-{a.resume}/", store), rank=a.rank,
                            world_size=a.world)
    if a.resume == "memory":
        got = manager().restore()
        step, tier = (got.step, got.tier) if got else (0, None)
    else:
        state = torch.load(Path(a.durable) / "ckpt.pt", weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, tier = int(state["step"]), "file"
    ddp = nn.parallel.DistributedDataParallel(model)
    train_step(ddp, opt, step + 1, a.rank, a.width, a.batch)
    Path(a.out).write_text(json.dumps({"first_step_at": time.time(), "restored_step": step, "tier": tier}))
    dist.destroy_process_group()


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    for name in ("--store", "--mem", "--disk", "--durable", "--out"):
        p.add_argument(name, required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--block", type=int, default=4)
    p.add_argument("--resume", choices=["memory", "file"], default=None)
    return p.parse_args()


if __name__ == "__main__":
    main()
