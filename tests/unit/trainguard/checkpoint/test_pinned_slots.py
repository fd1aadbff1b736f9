"""Page-locking the memory slots for GPU copies: registered, reported, unregistered; a failure degrades.

No GPU here: the CUDA runtime is the one boundary faked (`FakeCudart` stands
in for `torch.cuda.cudart()` and records what it is asked); the slots are
real /dev/shm-style mapped files and the manager is the real one on CPU.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from trainguard.checkpoint.config import CheckpointConfig
from trainguard.checkpoint.manager import CheckpointManager
from trainguard.checkpoint.store import SlotRing


class FakeCudart:
    """The two calls `trainguard.checkpoint.pinned` makes, answering `result` to every registration."""

    class cudaError:
        success = 0

    def __init__(self, result: int = 0) -> None:
        self.result = result
        self.registered: dict[int, int] = {}
        self.unregistered: list[int] = []

    def cudaHostRegister(self, ptr: int, nbytes: int, flags: int) -> int:
        assert nbytes > 0 and flags == 0
        if self.result == 0:
            assert ptr not in self.registered, "registered twice"
            self.registered[ptr] = nbytes
        return self.result

    def cudaHostUnregister(self, ptr: int) -> int:
        if ptr not in self.registered:
            return 712  # cudaErrorHostMemoryNotRegistered
        del self.registered[ptr]
        self.unregistered.append(ptr)
        return 0

    def cudaGetErrorString(self, err: Any) -> str:
        return {2: "out of memory"}.get(int(err), "unknown error")


def test_slots_are_registered_reported_and_unregistered(tmp_path: Path) -> None:
    cudart = FakeCudart()
    ring = SlotRing(tmp_path, 2, 4096, cudart=cudart)
    assert ring.pinned
    assert sorted(cudart.registered) == sorted(b.data_ptr() for b in ring.buffers)
    assert set(cudart.registered.values()) == {4096}
    ring.close()
    assert not ring.pinned and cudart.registered == {} and len(cudart.unregistered) == 2
    ring.close()  # idempotent: nothing is unregistered twice
    assert len(cudart.unregistered) == 2


def test_a_refused_registration_degrades_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cudart = FakeCudart(result=2)
    with caplog.at_level(logging.WARNING, logger="trainguard.checkpoint.pinned"):
        ring = SlotRing(tmp_path, 2, 4096, cudart=cudart)
    assert not ring.pinned
    assert "out of memory" in caplog.text and "synchronous" in caplog.text
    ring.buffers[0][:4] = torch.tensor([1, 2, 3, 4], dtype=torch.uint8)  # still a usable slot
    ring.close()
    assert cudart.unregistered == []  # only what was registered is unregistered


def test_without_a_runtime_nothing_is_pinned(tmp_path: Path) -> None:
    assert not SlotRing(tmp_path, 2, 4096).pinned


def test_a_cpu_manager_reports_unpinned_slots_and_splits_its_blocking_time(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Linear(64, 64)
    opt = torch.optim.Adam(model.parameters())
    mgr = CheckpointManager(job="j", model=model, optimizer=opt, rank=0, world_size=1,
                            config=CheckpointConfig(memory_dir=str(tmp_path / "mem"), peer=False))
    try:
        for step in range(1, 6):
            loss = model(torch.randn(4, 64)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            assert mgr.step(step, loss=loss.item())
            mgr.flush()  # each copy lands before the next step: a busy slot under load would skip it
        mgr.flush()
        assert not mgr.pinned
        stats = mgr.stats
        assert stats["snapshots"] == 5
        assert stats["blocked_s"] == pytest.approx(stats["launch_s"] + stats["wait_s"])
        assert stats["launch_s"] > 0
    finally:
        mgr.close(purge=True)
