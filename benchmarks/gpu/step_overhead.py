"""The training hook and the every-step checkpoint, per step, against the same loop uninstrumented.

One model, one optimizer, four loops run in interleaved blocks so drift
(clocks, thermals, a neighbour) cancels: `base` (forward, backward, Adam
step, `loss.item()` as every loop that logs its loss does), `hook`
(+ `TrainingMonitor.step`, null sink: the hook's own cost), `ckpt`
(+ `CheckpointManager.step` every step, own-memory tier) and `hook+ckpt`.

For the checkpoint it reports the time the training thread was blocked per
step (queuing the copy + waiting for the previous copy in the optimizer's
pre-hook; `CheckpointManager.stats`), whether the slots were page-locked,
and where they lived. On a GPU the state is CUDA tensors and the copy runs on
a side stream; with `device="cpu"` the same code runs without one (a dry run).
Overheads are given two ways: by difference of mean step times, and by
direct timing (hook call + checkpoint blocking) over the base step.
"""

from __future__ import annotations

import shutil
import socket
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

MODES = ("base", "hook", "ckpt", "hook+ckpt")
COUNTED = ("blocked_s", "launch_s", "wait_s", "snapshots", "skipped_busy")  # CheckpointManager.stats, per block


@dataclass(frozen=True)
class Shape:
    """The model (MLP blocks with a norm, like a transformer's feed-forward half) and the loop."""

    width: int = 2048
    hidden: int = 8192
    depth: int = 12
    tokens: int = 0  # per step; 0 = calibrate to `target_step_s`
    target_step_s: float = 0.5
    rounds: int = 5
    block: int = 8  # steps per mode per round
    max_tokens: int = 65536


class NullSink:
    """Drops records: the hook's and the manager's own cost, without a broker."""

    def publish(self, record: Any) -> None:
        pass

    def close(self, timeout_s: float = 10.0) -> bool:
        return True


def build(shape: Shape, device: str) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.LayerNorm(shape.width), nn.Linear(shape.width, shape.hidden), nn.GELU(),
                            nn.Linear(shape.hidden, shape.width)) for _ in range(shape.depth)]
    model = nn.Sequential(*blocks).to(device)
    return model, torch.optim.Adam(model.parameters(), lr=1e-4)


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> float:
    with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16, enabled=x.is_cuda):
        loss = model(x).float().pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return float(loss.item())  # a sync on a GPU, as in any loop that logs its loss


def calibrate(model: nn.Module, opt: torch.optim.Optimizer, shape: Shape, device: str) -> int:
    """Tokens per step for a step of about `target_step_s` (the loop's own speed, measured)."""
    if shape.tokens:
        return shape.tokens
    probe = 4096 if device != "cpu" else 256
    x = torch.randn(probe, shape.width, device=device)
    train_step(model, opt, x)  # allocations, kernels chosen
    t0 = time.perf_counter()
    for _ in range(3):
        train_step(model, opt, x)
    per = (time.perf_counter() - t0) / 3
    return max(probe, min(shape.max_tokens, int(probe * shape.target_step_s / per) // 256 * 256))


def memory_dir(need_bytes: int) -> tuple[Path, str]:
    """/dev/shm when it holds the slots with room to spare, else a temporary directory (said so)."""
    shm = Path("/dev/shm")
    if shm.is_dir() and shutil.disk_usage(shm).free > 1.25 * need_bytes:
        return Path(tempfile.mkdtemp(prefix="tg-gpu-ckpt-", dir=shm)), "/dev/shm"
    free = shutil.disk_usage(shm).free if shm.is_dir() else 0
    return Path(tempfile.mkdtemp(prefix="tg-gpu-ckpt-")), f"temp dir (/dev/shm has {free / 1e9:.1f} GB free)"


def measure(shape: Shape, device: str) -> dict[str, Any]:
    from trainguard.checkpoint.config import CheckpointConfig
    from trainguard.checkpoint.layout import flatten
    from trainguard.checkpoint.manager import CheckpointManager
    from trainguard.checkpoint.state import get_state
    from trainguard.training_hook import TrainingMonitor

    model, opt = build(shape, device)
    tokens = calibrate(model, opt, shape, device)  # also creates Adam's state: the snapshot's final shape
    _, tensors = flatten(get_state(model, opt))
    state_bytes = sum(t.numel() * t.element_size() for t in tensors)
    cfg = CheckpointConfig(every=1, peer=False, announce_memory=True)
    where, where_note = memory_dir(cfg.memory_slots * state_bytes)
    monitor = TrainingMonitor(job="gpu-bench", model=model, publisher=NullSink(), install_stack_signal=False,
                              env={"NODE_NAME": socket.gethostname()})
    manager = CheckpointManager(job="gpu-bench", model=model, optimizer=opt, rank=0, world_size=1,
                                publisher=NullSink(), config=cfg.model_copy(update={"memory_dir": str(where)}))
    x = torch.randn(tokens, shape.width, device=device)
    loop = Loop(model, opt, x, monitor, manager)
    try:
        for mode in MODES:  # warm-up: the slots are mapped and page-locked on the first snapshot
            loop.block(mode, 2)
        loop.reset()
        times: dict[str, list[float]] = {m: [] for m in MODES}
        for _ in range(shape.rounds):
            for mode in MODES:
                times[mode] += loop.block(mode, shape.block)
        pinned = manager.pinned
    finally:
        monitor.close()
        manager.close(purge=True)
        shutil.rmtree(where, ignore_errors=True)
    return _report(shape, device, tokens, state_bytes, len(tensors), where_note, pinned, times, loop)


class Loop:
    """Runs blocks of one mode and keeps the per-step costs of the hook and the checkpoint."""

    def __init__(self, model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, monitor: Any,
                 manager: Any) -> None:
        self.model, self.opt, self.x, self.monitor, self.manager = model, opt, x, monitor, manager
        self.step = 0
        self.reset()

    def reset(self) -> None:
        """Forget what was counted so far (the warm-up)."""
        self.hook_s: dict[str, float] = dict.fromkeys(MODES, 0.0)
        # snapshots taken and skipped (both slots busy: the previous copy was still being checksummed)
        self.ckpt: dict[str, dict[str, float]] = {m: dict.fromkeys(COUNTED, 0.0) for m in MODES}
        self.steps: dict[str, int] = dict.fromkeys(MODES, 0)

    def block(self, mode: str, steps: int) -> list[float]:
        """`steps` steps of `mode`; their wall times. The last copy is flushed outside the timing."""
        before = dict(self.manager.stats)
        out = []
        for _ in range(steps):
            self.step += 1
            t0 = time.perf_counter()
            loss = train_step(self.model, self.opt, self.x)
            if "hook" in mode:
                h0 = time.perf_counter()
                self.monitor.step(loss=loss, tokens=self.x.shape[0], step=self.step)
                self.hook_s[mode] += time.perf_counter() - h0
            if "ckpt" in mode:
                self.manager.step(self.step, loss=loss)
            out.append(time.perf_counter() - t0)
        self.manager.flush()
        for key in self.ckpt[mode]:
            self.ckpt[mode][key] += self.manager.stats[key] - before[key]
        self.steps[mode] += steps
        return out


def _report(shape: Shape, device: str, tokens: int, state_bytes: int, n_tensors: int, where: str, pinned: bool,
            times: dict[str, list[float]], loop: Loop) -> dict[str, Any]:
    base = statistics.fmean(times["base"])
    modes: dict[str, Any] = {}
    for mode in MODES:
        n = loop.steps[mode]
        mean = statistics.fmean(times[mode])
        row: dict[str, Any] = {"steps": len(times[mode]), "step_s_mean": round(mean, 6),
                               "step_s_median": round(statistics.median(times[mode]), 6),
                               "overhead_by_difference": round(mean / base - 1, 6)}
        direct = loop.hook_s[mode] / n + loop.ckpt[mode]["blocked_s"] / n
        row["hook_s_per_step"] = round(loop.hook_s[mode] / n, 7)
        timed = {k: v for k, v in loop.ckpt[mode].items() if k.endswith("_s")}
        row.update({f"ckpt_{k}_per_step": round(v / n, 7) for k, v in timed.items()})
        row.update(snapshots=int(loop.ckpt[mode]["snapshots"]), snapshots_skipped=int(loop.ckpt[mode]["skipped_busy"]))
        row["overhead_by_direct_timing"] = round(direct / base, 6)
        modes[mode] = row
    both = modes["hook+ckpt"]
    return {
        "device": device, "model": {"params": sum(p.numel() for p in loop.model.parameters()),
                                    "state_mb": round(state_bytes / 1e6, 1), "state_tensors": n_tensors,
                                    "width": shape.width, "hidden": shape.hidden, "depth": shape.depth},
        "tokens_per_step": tokens, "base_step_s": round(base, 6), "slots": where, "slots_pinned": pinned,
        "modes": modes,
        "targets": {"ckpt_blocked_s_per_step_le_0.04": both["ckpt_blocked_s_per_step"] <= 0.04,
                    "hook_plus_ckpt_le_0.5pct_of_a_step": both["overhead_by_direct_timing"] <= 0.005},
    }
