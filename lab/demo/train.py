"""The demo's training job: a small MLP, data-parallel over gloo on the CPU.

Run one process per rank: under torchrun (which sets RANK/WORLD_SIZE/MASTER_*),
or alone with `--nnodes N --rdzv-endpoint HOST:PORT`, in which case the
process joins torch's c10d rendezvous itself, as torchrun's agent would, and
gets its rank from it (the demo does this: one torch import per rank instead
of two, which matters when restarts are timed on two cores). It is an
ordinary PyTorch loop plus trainguard's `TrainingGuard` (the training hook and
the checkpoint manager in one call): every step is snapshotted into the
node's RAM and backed up to a peer node, every 5th to the node's disk, every
`--ckpt-every` to the shared checkpoint directory. A restarted rank resumes
from the newest step before `TRAINGUARD_RESUME_STEP` that every rank holds in
some tier (a standby pulls the evicted node's shard from its peer), else
from the job-level file named by `TRAINGUARD_RESUME_PATH`. It loads the
"code version" named by `TRAINGUARD_CODE_VERSION`: version `v2-bad` carries a
shape bug in its input pipeline, as a bad hot update would. Faults come from the demo's fault
board (`TRAINGUARD_DEMO_FAULTS`), never from the code path itself.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

import trainguard
from trainguard.checkpoint.config import CheckpointConfig
from trainguard.checkpoint.guard import TrainingGuard
from trainguard.checkpoint.manager import CheckpointManager
from trainguard.checkpoint.ranks import rank_hint, stable_ranks
from trainguard.lab.demo.faults import FaultBoard, final_step

FEATURES, HIDDEN = 64, 256


def build_model() -> nn.Module:
    """A small MLP; every code version shares it, so checkpoints stay loadable."""
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, 1))


def batch(step: int, rank: int, code_version: str, size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic synthetic data: the same step always sees the same batch.

    Version `v2-bad` carries the user bug a bad hot update brings: its new
    feature pipeline drops a column, and the first forward pass fails with a
    shape mismatch on every rank.
    """
    gen = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(size, FEATURES, generator=gen)
    y = torch.sin(x[:, :4].sum(dim=1, keepdim=True))
    if code_version == "v2-bad":
        x = x[:, 1:]
    return x, y


def main() -> None:
    args = _args()
    _init_distributed(args)
    rank = dist.get_rank()
    node = os.environ.get("NODE_NAME", "node")
    code_version = os.environ.get("TRAINGUARD_CODE_VERSION", "v1")
    torch.manual_seed(0)
    model = build_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    monitor = trainguard.TrainingMonitor(job=args.job, model=model, checksum_every=1, heartbeat_interval_s=1.0,
                                         flops_per_token=6.0 * sum(p.numel() for p in model.parameters()),
                                         peak_flops=5e9)
    ram = _ram(args)  # this "machine's" memory and disk
    tiers = CheckpointConfig(
        memory_dir=str(ram / "mem"), memory_slots=3, disk_dir=str(ram / "disk"), disk_every=5, disk_keep=40,
        durable=str(Path(args.ckpt_dir) / "tiered"), durable_every=args.ckpt_every,
        durable_keep=1_000_000)  # like the job's own checkpoints: a late restart to an old step finds it
    ckpt = CheckpointManager(job=args.job, model=model, optimizer=opt, node=node, publisher=monitor, config=tiers)
    start = _resume(model, opt, ckpt)
    ckpt.forget_after(start)  # copies of later steps belong to a timeline this run abandons
    monitor.current_step = start
    guard = TrainingGuard(monitor, ckpt)
    ddp = nn.parallel.DistributedDataParallel(model)
    board = FaultBoard(Path(os.environ["TRAINGUARD_DEMO_FAULTS"])) if "TRAINGUARD_DEMO_FAULTS" in os.environ else None
    fired: set[str] = set()
    final_file = Path(os.environ["TRAINGUARD_DEMO_FINAL"]) if "TRAINGUARD_DEMO_FINAL" in os.environ else None
    for step in range(start + 1, args.steps + 1):
        final = final_step(final_file)
        if final is not None and step > final:
            break
        fault = board.current() if board else None
        fault = fault if fault and fault.id not in fired and fault.targets(rank, node) else None
        if fault:
            fired.add(fault.id)
        t0 = time.perf_counter()
        x, y = batch(step, rank, code_version)
        loss = nn.functional.mse_loss(ddp(x), y)
        if fault and fault.kind == "nan":
            loss = loss * math.nan
        time.sleep(args.compute_s + (fault.slow_s if fault and fault.kind == "slow" else 0.0))
        if fault and fault.kind == "slow":
            fired.discard(fault.id)  # a slow node stays slow until it is replaced
        if fault and fault.kind == "hang":
            while True:  # a rank stuck before its collective: every peer blocks in all-reduce
                time.sleep(1)
        compute_s = time.perf_counter() - t0
        opt.zero_grad()
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9))
        opt.step()
        if fault and fault.kind == "bitflip":
            _flip_a_bit(model)
        guard.step(step, loss=loss.item(), tokens=x.shape[0], grad_norm=grad_norm, compute_time_s=compute_s)
    ckpt.close()
    monitor.close()
    dist.destroy_process_group()


def _init_distributed(args: argparse.Namespace) -> None:
    """torchrun's environment if present, else a c10d rendezvous of `--nnodes` processes."""
    if "RANK" in os.environ or not args.rdzv_endpoint:
        dist.init_process_group("gloo")
        return
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

    params = RendezvousParameters(backend="c10d", endpoint=args.rdzv_endpoint, run_id=args.job,
                                  min_nodes=args.nnodes, max_nodes=args.nnodes, join_timeout="600",
                                  last_call_timeout="1")
    info = get_rendezvous_handler(params).next_rendezvous()
    dist.init_process_group("gloo", store=dist.PrefixStore("train/", info.store), rank=info.rank,
                            world_size=info.world_size)
    # The rendezvous numbers ranks by join order; keep each machine's previous rank so its in-memory
    # checkpoint is still its own (a standby takes the evicted machine's rank).
    hints: list[int | None] = [None] * info.world_size
    dist.all_gather_object(hints, rank_hint(_ram(args) / "mem"))
    ranks = stable_ranks(hints)
    if ranks != list(range(info.world_size)):
        dist.destroy_process_group()
        dist.init_process_group("gloo", store=dist.PrefixStore("train-stable/", info.store),
                                rank=ranks[info.rank], world_size=info.world_size)


def _ram(args: argparse.Namespace) -> Path:
    return Path(args.ram_dir or f"/dev/shm/trainguard/{args.job}") / os.environ.get("NODE_NAME", "node")


def _flip_a_bit(model: nn.Module) -> None:
    """Silent data corruption: flip one exponent bit of one weight in place."""
    with torch.no_grad():
        weight = next(model.parameters()).view(-1)
        bits = weight[:1].view(torch.int32)
        bits ^= 1 << 23


def _resume(model: nn.Module, opt: torch.optim.Optimizer, ckpt: CheckpointManager) -> int:
    """The step to continue after: the manager's best copy, else the job-level file, else the start."""
    step = int(os.environ.get("TRAINGUARD_RESUME_STEP", "0") or 0)
    path = os.environ.get("TRAINGUARD_RESUME_PATH")
    if step or path:
        restored = ckpt.restore(before=step + 1 if step else None)  # every rank agrees on one step
        print(f"rank {ckpt.rank}: asked for step {step}, restored "
              + (f"step {restored.step} from {restored.tier}" if restored else "nothing"), flush=True)
        if restored is not None:
            return restored.step
    if not path or not Path(path).exists():
        return step if not path else 0
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return int(state["step"])


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--job", default="demo")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--ckpt-every", type=int, default=20)
    p.add_argument("--ckpt-dir", default=".trainguard/demo/checkpoints")
    p.add_argument("--ram-dir", default="", help="RAM-backed directory for in-memory checkpoints "
                   "(default /dev/shm/trainguard/JOB)")
    p.add_argument("--compute-s", type=float, default=0.15, help="simulated compute per step")
    p.add_argument("--nnodes", type=int, default=1, help="processes to rendezvous with (without torchrun)")
    p.add_argument("--rdzv-endpoint", default="", help="c10d rendezvous HOST:PORT (without torchrun)")
    return p.parse_args()


if __name__ == "__main__":
    main()
