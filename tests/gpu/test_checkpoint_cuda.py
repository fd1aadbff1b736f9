"""The every-step checkpoint with CUDA tensors: page-locked slots, a side-stream copy, an exact restore."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fakes import ListSink
from torch import nn

from trainguard.checkpoint.config import CheckpointConfig
from trainguard.checkpoint.manager import CheckpointManager

pytestmark = pytest.mark.gpu


def _train(model: nn.Module, opt: torch.optim.Optimizer, seed: int) -> None:
    torch.manual_seed(seed)
    x = torch.randn(64, 256, device="cuda")
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def test_cuda_state_is_snapshotted_into_pinned_slots_and_restored_bit_for_bit(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256)).cuda()
    opt = torch.optim.Adam(model.parameters())
    sink = ListSink()
    mgr = CheckpointManager(job="gpu", model=model, optimizer=opt, rank=0, world_size=1, publisher=sink,
                            config=CheckpointConfig(every=1, peer=False, memory_dir=str(tmp_path)))
    try:
        for step in range(1, 4):
            _train(model, opt, step)
            assert mgr.step(step)
            mgr.wait_copy()
        want = [t.clone() for t in model.state_dict().values()]
        assert mgr.pinned, "the slots of a CUDA state are page-locked"
        _train(model, opt, 99)
        got = mgr.restore(step=3)
        assert got is not None and got.step == 3
        assert all(a.is_cuda and torch.equal(a, b) for a, b in zip(model.state_dict().values(), want, strict=True))
    finally:
        mgr.close(purge=True)
