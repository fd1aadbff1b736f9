"""One rank of an FSDP2 (`fully_shard`) job on the CPU over gloo: snapshot, train on, restore, compare.

A test helper: writes a JSON report to `--out`.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

from trainguard.checkpoint.config import CheckpointConfig
from trainguard.checkpoint.layout import flatten, local_tensor
from trainguard.checkpoint.manager import CheckpointManager
from trainguard.checkpoint.peer import list_backups
from trainguard.checkpoint.state import get_state


def local_shards(model: nn.Module, opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [local_tensor(t)[0].detach().clone() for t in flatten(get_state(model, opt))[1]]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int)
    p.add_argument("--store")
    p.add_argument("--mem")
    p.add_argument("--out")
    a = p.parse_args()
    host, port = a.store.rsplit(":", 1)
    store = dist.TCPStore(host, int(port), 2, is_master=False, timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=a.rank, world_size=2)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    mgr = CheckpointManager(job="fsdp", model=model, optimizer=opt,
                            config=CheckpointConfig(memory_dir=a.mem, memory_slots=4))

    def train(step: int) -> None:
        gen = torch.Generator().manual_seed(step * 10 + a.rank)
        loss = model(torch.randn(4, 32, generator=gen)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        mgr.step(step, loss=loss.item())

    for step in (1, 2):
        train(step)
    mgr.wait_copy()
    saved = local_shards(model, opt)
    for step in (3, 4):
        train(step)
    mgr.wait_copy()
    saved4 = local_shards(model, opt)
    deadline = time.time() + 30
    while 4 not in list_backups(mgr.sources().peer_addr or "", "fsdp", a.rank) and time.time() < deadline:
        time.sleep(0.05)  # the peer backup ships in the background; nothing newer supersedes step 4
    train(5)
    changed = not all(torch.equal(x, y) for x, y in zip(saved, local_shards(model, opt), strict=True))
    restored = mgr.restore(step=2)
    assert restored is not None
    after = local_shards(model, opt)
    from_peer = mgr.restore(step=4, tiers=("peer",))
    peer_equal = from_peer is not None and all(
        torch.equal(x, y) for x, y in zip(saved4, local_shards(model, opt), strict=True))
    full = sum(p.numel() for p in nn.Sequential(nn.Linear(32, 64), nn.Linear(64, 8)).parameters())
    report = {"changed_by_training": changed, "tier": restored.tier, "step": restored.step,
              "peer_tier": from_peer.tier if from_peer else None, "peer_equal": peer_equal,
              "equal": all(torch.equal(x, y) for x, y in zip(saved, after, strict=True)),
              "sharded": any(s.sharded for s in restored.manifest.layout_obj().specs),
              "local_params": sum(t.numel() for t in after[:4]), "full_params": full}
    dist.barrier()
    Path(a.out).write_text(json.dumps(report))
    mgr.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
