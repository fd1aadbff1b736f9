"""Snapshots round-trip through every tier, and a corrupt copy is never loaded (real torch, real TCP)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from trainguard.checkpoint.config import CheckpointConfig
from trainguard.checkpoint.manager import CheckpointManager
from trainguard.checkpoint.peer import BackupServer, fetch_backup, send_backup
from trainguard.checkpoint.restore import RestoreSources, restore_from
from trainguard.checkpoint.store import Manifest, read_slot_manifests


class ListSink:
    def __init__(self) -> None:
        self.records: list[object] = []

    def publish(self, record: object) -> None:
        self.records.append(record)


def _train(model: nn.Module, opt: torch.optim.Optimizer, step: int) -> float:
    gen = torch.Generator().manual_seed(step)
    loss = model(torch.randn(8, 16, generator=gen)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.item())


def _manager(tmp: Path, **cfg: object) -> tuple[CheckpointManager, nn.Module, torch.optim.Optimizer, ListSink]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters())
    sink = ListSink()
    config = CheckpointConfig(memory_dir=str(tmp / "mem"), **cfg)  # type: ignore[arg-type]
    return CheckpointManager(job="j", model=model, optimizer=opt, config=config, rank=0, world_size=1,
                             publisher=sink), model, opt, sink


def test_every_tier_is_announced_and_restores_the_exact_state(tmp_path: Path) -> None:
    mgr, model, opt, sink = _manager(tmp_path, peer=False, disk_dir=str(tmp_path / "disk"), disk_every=2,
                                     durable=f"file://{tmp_path}/durable", durable_every=2)
    try:
        for step in range(1, 5):
            _train(model, opt, step)
            assert mgr.step(step)
            mgr.flush()
            if step == 4:
                want = [t.clone() for t in model.state_dict().values()]
        mgr.close()
        tiers = {(r.tier, r.step) for r in sink.records}  # type: ignore[attr-defined]
        assert {("memory", s) for s in range(1, 5)} <= tiers
        assert ("disk", 4) in tiers and ("durable", 4) in tiers
        for tier in ("memory", "disk", "durable"):
            _train(model, opt, 99)  # move away from step 4
            got = mgr.restore(step=4, tiers=(tier,))
            assert got is not None and got.tier == tier
            assert all(torch.equal(a, b) for a, b in zip(want, model.state_dict().values(), strict=True))
    finally:
        mgr.close(purge=True)


def test_a_nan_step_is_never_snapshotted(tmp_path: Path) -> None:
    mgr, model, opt, _ = _manager(tmp_path, peer=False)
    try:
        assert mgr.step(1, loss=0.5)
        mgr.wait_copy()
        assert not mgr.step(2, loss=float("nan"))
        assert not mgr.step(3, loss=0.4)  # poisoned until a restore
        assert mgr.first_bad_step == 2
        got = mgr.restore(before=2)
        assert got is not None and got.step == 1 and mgr.first_bad_step is None
    finally:
        mgr.close(purge=True)


def test_corrupt_peer_backup_is_refused_and_restore_falls_back(tmp_path: Path) -> None:
    mgr, model, opt, _ = _manager(tmp_path, peer=False, durable=str(tmp_path / "durable"), durable_every=1)
    holder = BackupServer(tmp_path / "peer-ram")
    try:
        _train(model, opt, 1)
        mgr.step(1)
        mgr.wait_copy()
        mgr.close()
        manifest, slot = read_slot_manifests(mgr.own_dir)[0]
        payload = bytearray(slot.read_bytes()[:manifest.nbytes])
        assert send_backup(holder.address, manifest, payload)["ok"]
        # a transfer corrupted on the way is refused by the holder
        bad = bytearray(payload)
        bad[10] ^= 0xFF
        reply = send_backup(holder.address, manifest, bad)
        assert not reply["ok"] and "checksum" in reply["error"]
        # a copy corrupted while held (a bad DIMM) is rejected by the restoring rank
        held = next((tmp_path / "peer-ram").glob("peer-j-0/slot*.bin"))
        raw = bytearray(held.read_bytes())
        raw[100] ^= 0x01
        held.write_bytes(raw)
        got = fetch_backup(holder.address, "j", 0)
        assert got is not None and isinstance(got[0], Manifest)
        src = RestoreSources(job="j", rank=0, own_dir=tmp_path / "none", durable=str(tmp_path / "durable"),
                             peer_addr=holder.address)
        restored = restore_from(src, step=1, tiers=("peer", "durable"))
        assert restored is not None and restored.tier == "durable"
        assert restored.rejected == [("peer", 1, "checksum mismatch or truncated")]
    finally:
        holder.close()
        mgr.close(purge=True)


def test_memory_stays_bounded_by_the_slots(tmp_path: Path) -> None:
    mgr, model, opt, _ = _manager(tmp_path, peer=False, memory_slots=3, keep_every=4)
    try:
        for step in range(1, 11):
            _train(model, opt, step)
            mgr.step(step)
            mgr.flush()  # committed and its slot released: which slots are reused must not depend on timing
        mgr.close()
        held = sorted(m.step for m, _ in read_slot_manifests(mgr.own_dir))
        assert held == [8, 9, 10]  # the newest two and the newest multiple of keep_every
        assert len(list(mgr.own_dir.glob("slot*.bin"))) == 3
    finally:
        mgr.close(purge=True)


def test_copies_after_a_rollback_are_forgotten(tmp_path: Path) -> None:
    """After restoring step 2, steps 3-4 of the abandoned timeline must never be restored again."""
    mgr, model, opt, _ = _manager(tmp_path, peer=False, memory_slots=4, disk_dir=str(tmp_path / "disk"),
                                  disk_every=1, disk_keep=10)
    holder = BackupServer(tmp_path / "peer-ram")
    try:
        for step in range(1, 5):
            _train(model, opt, step)
            mgr.step(step)
            mgr.flush()
            m, slot = max(read_slot_manifests(mgr.own_dir), key=lambda mp: mp[0].step)
            assert send_backup(holder.address, m, bytearray(slot.read_bytes()[:m.nbytes]))["ok"]
        assert mgr.restore(step=2, tiers=("disk",)) is not None
        assert sorted(m.step for m, _ in read_slot_manifests(mgr.own_dir)) == [1, 2]
        assert sorted(int(p.name[5:]) for p in (tmp_path / "disk" / "j").iterdir()) == [1, 2]
        _train(model, opt, 3)
        mgr.step(3)
        mgr.flush()
        m, slot = max(read_slot_manifests(mgr.own_dir), key=lambda mp: mp[0].step)
        assert send_backup(holder.address, m, bytearray(slot.read_bytes()[:m.nbytes]))["ok"]
        held = sorted(m.step for m, _ in read_slot_manifests(tmp_path / "peer-ram" / "peer-j-0"))
        assert held == [3]  # the holder dropped the old timeline's step 4 (its other slot)
        got = fetch_backup(holder.address, "j", 0)
        assert got is not None and got[0].checksum == m.checksum
    finally:
        holder.close()
        mgr.close(purge=True)
