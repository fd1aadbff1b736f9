"""What the framework callbacks cost per step, against the same framework loop without them.

For Lightning (a small MLP) and Transformers (a one-layer GPT-2), both on the
CPU, the same seeded run is timed three ways in one process: the bare
framework loop, with `TrainguardCallback` publishing to a null sink
(`checkpoint=False`: the reporting alone), and with every-step checkpoints
into RAM (`checkpoint=True`, the default). The figure is the added median wall time
per step (setup and the first 20 steps excluded), in microseconds and as a share of a 100 ms step (the training
hook's budget reference, docs/collectors.md), and the ratio to the bare loop.
Steps here take a few ms, far below real ones: the share of a real step is
the added time over its length, not the ratio printed here.

    python -m benchmarks.bench_callbacks [--steps 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

from trainguard.schemas.records import Record

REAL_STEP_S = 0.1
WARM = 20  # steps before the clock starts: setup, first-step allocations, the checkpoint layout


class Clock:
    """The median step time after WARM steps, from inside the loop (setup excluded; the median shrugs off
    the other processes of a shared machine)."""

    def __init__(self) -> None:
        self.last = 0.0
        self.times: list[float] = []

    def tick(self, step: int) -> None:
        now = time.perf_counter()
        if step > WARM:
            self.times.append(now - self.last)
        self.last = now

    def per_step(self) -> float:
        return statistics.median(self.times)


class NullSink:
    """A publisher that drops everything (the callback's own cost, no Kafka)."""

    def publish(self, record: Record) -> None:
        pass

    def close(self, timeout_s: float = 10.0) -> bool:
        return True


HOOKS = ("on_train_start", "on_before_optimizer_step", "on_train_batch_end", "on_train_begin", "_forward_done",
         "on_pre_optimizer_step", "on_step_end", "on_log", "on_save")


def timed(callback: Any, spent: list[float]) -> Any:
    """`callback` with each of its hooks timed into `spent[0]` (the callback's own time on the loop's thread)."""
    for name in HOOKS:
        fn = getattr(callback, name, None)
        if fn is None:
            continue

        def wrap(*a: Any, _fn: Any = fn, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return _fn(*a, **kw)
            finally:
                spent[0] += time.perf_counter() - t0

        setattr(callback, name, wrap)
    return callback


def monitor(job: str) -> Any:
    from trainguard import TrainingMonitor

    return TrainingMonitor(job=job, publisher=NullSink(), install_stack_signal=False, checksum_every=0)


def lightning_loop(steps: int, mode: str) -> tuple[float, float, float]:
    import lightning as L

    from trainguard.checkpoint import CheckpointConfig
    from trainguard.integrations.lightning import TrainguardCallback

    class Mlp(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))

        def training_step(self, batch: Any, idx: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    torch.manual_seed(0)
    x = torch.randn(32 * steps, 64)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=32)
    clock, spent, cb = Clock(), [0.0], None

    class Tick(L.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            clock.tick(trainer.global_step)

    callbacks: list[Any] = [Tick()]
    if mode != "bare":
        shm = tempfile.mkdtemp(prefix="tg-bench-")
        ckpt: Any = CheckpointConfig(memory_dir=shm, peer=False) if mode == "checkpoint" else False
        cb = TrainguardCallback(job=f"bench-l-{mode}", monitor=monitor("bench"), checkpoint=ckpt,
                                tokens=lambda b: b[0].shape[0])
        callbacks.append(timed(cb, spent))
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks)
    trainer.fit(Mlp(), loader)
    return clock.per_step(), spent[0] / steps, _blocked(cb, steps)


def huggingface_loop(steps: int, mode: str) -> tuple[float, float, float]:
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    from trainguard.checkpoint import CheckpointConfig
    from trainguard.integrations.huggingface import TrainguardCallback

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=1, n_head=2))
    rows = [torch.randint(0, 256, (32,)) for _ in range(8 * steps)]
    data = [{"input_ids": r, "labels": r.clone()} for r in rows]
    out = tempfile.mkdtemp(prefix="tg-bench-hf-")
    args = TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=8, logging_steps=10**6,
                             save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True, seed=0)
    clock, spent, cb = Clock(), [0.0], None

    class Tick(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            clock.tick(state.global_step)

    callbacks: list[Any] = [Tick()]
    if mode != "bare":
        ckpt: Any = CheckpointConfig(memory_dir=tempfile.mkdtemp(prefix="tg-bench-"), peer=False) \
            if mode == "checkpoint" else False
        cb = TrainguardCallback(job=f"bench-h-{mode}", monitor=monitor("bench"), checkpoint=ckpt)
        callbacks.append(timed(cb, spent))
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks)
    trainer.train()
    return clock.per_step(), spent[0] / steps, _blocked(cb, steps)


def _blocked(cb: Any, steps: int) -> float:
    """Time the training thread waited on the checkpoint copy (inside opt.step), per step."""
    manager = cb.reporter.manager if cb is not None else None
    return float(manager.stats["blocked_s"]) / steps if manager is not None else 0.0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    steps = p.parse_args().steps
    torch.set_num_threads(1)  # fewer threads to fight the machine's other processes: steadier medians
    print(f"load: {os.getloadavg()[0]:.1f} (1 min) on {os.cpu_count()} cores; {steps} steps; the three modes "
          "interleaved, 3 rounds, best median")
    loops: dict[str, Callable[[int, str], tuple[float, float, float]]] = {"lightning": lightning_loop,
                                                                           "huggingface": huggingface_loop}
    for name, fn in loops.items():
        runs: dict[str, list[tuple[float, float, float]]] = {"bare": [], "report": [], "checkpoint": []}
        for _ in range(3):
            for mode in runs:
                runs[mode].append(fn(steps, mode))
        bare = min(r[0] for r in runs["bare"])
        for mode in ("report", "checkpoint"):
            step_s = min(r[0] for r in runs[mode])
            in_hooks = min(r[1] for r in runs[mode])
            blocked = min(r[2] for r in runs[mode])
            print(f"{name:12} {mode:10} bare {bare * 1e3:6.2f} ms/step, with {step_s * 1e3:6.2f} ms/step "
                  f"(ratio {step_s / bare:4.2f}x); in the callback's hooks {in_hooks * 1e6:6.0f} us/step "
                  f"+ waiting on the copy {blocked * 1e6:5.0f} us/step = "
                  f"{(in_hooks + blocked) / REAL_STEP_S:6.2%} of a 100 ms step")


if __name__ == "__main__":
    main()
