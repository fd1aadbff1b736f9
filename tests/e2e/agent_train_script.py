"""A small real torch training job for the agent's end-to-end tests (CPU, single process).

It resumes from TRAINGUARD_RESUME_PATH when set, announces everything through
the training hook, saves a checkpoint every 5 steps, and can be told to hang
(HANG_AT_STEP) inside a function whose name shows up in stack samples.
"""

from __future__ import annotations

import os
import sys
import time

import torch

import trainguard


def hang_in_fake_collective() -> None:
    print("hanging", flush=True)
    while True:
        time.sleep(0.5)


def main() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ckpt_dir = os.environ["CKPT_DIR"]
    start = 0
    resume = os.environ.get("TRAINGUARD_RESUME_PATH")
    if resume:
        state = torch.load(resume)
        model.load_state_dict(state["model"])
        start = state["step"]
    print(f"attempt={os.environ.get('TRAINGUARD_ATTEMPT')} code_version={os.environ.get('TRAINGUARD_CODE_VERSION')}"
          f" resume_step={os.environ.get('TRAINGUARD_RESUME_STEP')} start={start}", flush=True)
    monitor = trainguard.TrainingMonitor(job=os.environ["JOB"], model=model, checksum_every=5,
                                         heartbeat_interval_s=0.5, peak_flops=1e12)
    hang_at = int(os.environ.get("HANG_AT_STEP", "-1"))
    x, y = torch.randn(64, 16), torch.randn(64, 1)
    for step in range(start + 1, start + 100000):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        monitor.step(loss=loss.item(), tokens=64, grad_norm=float(norm), step=step)
        if step % 5 == 0:
            path = os.path.join(ckpt_dir, f"step{step}.pt")
            with monitor.phase("checkpointing"):
                torch.save({"model": model.state_dict(), "step": step}, path)
            monitor.checkpoint_saved(step, path)
        if step == hang_at:
            hang_in_fake_collective()
        if os.environ.get("FAIL_AT_STEP") == str(step):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        time.sleep(0.05)
    monitor.close()


if __name__ == "__main__":
    sys.exit(main())
