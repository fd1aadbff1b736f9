"""The checkpoint manager: one call per step keeps a fresh copy of the rank's state in four tiers.

    ckpt = CheckpointManager(job="llm", model=model, optimizer=opt, publisher=monitor_sink)
    for step in ...:
        loss = ...; loss.backward(); opt.step()
        ckpt.step(step, loss=loss.item())   # returns at once; copies overlap the next step

The copy into a reusable CPU buffer runs on a background thread (for state on
a GPU: a side CUDA stream into slots page-locked in place, `pinned.py`, with
`pinned` saying whether they are) while the next forward/backward runs; a
pre-hook on the optimizer makes `opt.step()` wait for it, because that is the
first moment the parameters change. `stats` splits the time the training
thread spends on it into queuing the copy and waiting for it. Checksums, the peer backup, disk and
durable copies run on a second thread from the last complete buffer and are
skipped, never queued, when they fall behind: the step never waits on the
network. A step whose loss or gradient norm is not finite is never
snapshotted, so the newest copy always predates a NaN.
"""

from __future__ import annotations

import base64
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import trainguard.checkpoint.pinned as pinned
from trainguard.checkpoint.config import CheckpointConfig
from trainguard.checkpoint.layout import Layout, checksum, copy_in, flatten, local_tensor, plan_layout
from trainguard.checkpoint.peer import BackupServer, PeerChoice, choose_peer, send_backup
from trainguard.checkpoint.restore import TIERS, Restored, RestoreSources, agree_step, load_state, restore_from
from trainguard.checkpoint.state import get_state, set_state
from trainguard.checkpoint.store import (
    Manifest,
    SlotRing,
    drop_rank_after,
    memory_root,
    read_slot_manifests,
    write_files,
)
from trainguard.schemas.records import CheckpointEvent

log = logging.getLogger(__name__)


class CheckpointManager:
    """Tiered, overlapped, every-step checkpoints of one rank's model and optimizer."""

    def __init__(self, *, job: str, model: Any, optimizer: Any = None, config: CheckpointConfig | None = None,
                 rank: int | None = None, world_size: int | None = None, tp: int = 1, pp: int = 1,
                 node: str | None = None, publisher: Any = None, peer_addrs: Mapping[int, str] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        import torch

        self.job, self.model, self.optimizer = job, model, optimizer
        self.cfg = config or CheckpointConfig()
        dist = _dist()
        self.rank = rank if rank is not None else (dist.get_rank() if dist else 0)
        self.world_size = world_size if world_size is not None else (dist.get_world_size() if dist else 1)
        self.tp, self.pp = tp, pp
        self.node = node or os.environ.get("NODE_NAME") or os.uname().nodename
        self.publisher = publisher
        self._clock = clock
        self.code_version = os.environ.get("TRAINGUARD_CODE_VERSION", "")  # rollbacks look for the last good one
        self.root = memory_root(job, self.cfg.memory_dir)
        self.own_dir = self.root / f"own-{self.rank}"
        self._cudart = pinned.cuda_runtime()  # None without a usable GPU
        self._stream = torch.cuda.Stream() if self._cudart is not None else None
        self._on_gpu = False  # the state lives on the GPU: copy on the side stream into page-locked slots
        self._ring: SlotRing | None = None
        self._layout: Layout | None = None
        self._slot_step: dict[int, int] = {}
        self._busy: set[int] = set()  # slots being written or read
        self._lock = threading.Lock()
        self._copied = threading.Event()
        self._copied.set()
        self._copier: threading.Thread | None = None
        self._pending: tuple[int, Manifest] | None = None
        self._wake = threading.Event()
        self._closed = False
        self._last_done = {"peer": 0, "disk": 0, "durable": 0}
        self.first_bad_step: int | None = None
        # blocked_s: time the training thread spent on us, = launch_s (in step(): flatten the state, queue the
        # copies) + wait_s (in the optimizer's pre-hook: the copy of the previous step was not done yet)
        self.stats: dict[str, float] = {"snapshots": 0, "skipped_busy": 0, "peer_sent": 0, "peer_failed": 0,
                                        "blocked_s": 0.0, "launch_s": 0.0, "wait_s": 0.0}
        self.server = BackupServer(self.root, host=self.cfg.host, port=self.cfg.port) if self.cfg.peer else None
        self.peer: PeerChoice | None = None
        self.addrs: dict[int, str] = {}
        self.node_of: dict[int, str] = {}
        self.reconnect(peer_addrs)
        if optimizer is not None and hasattr(optimizer, "register_step_pre_hook"):
            optimizer.register_step_pre_hook(lambda *_: self._wait_before_update())
        self._shipper = threading.Thread(target=self._ship_loop, name="trainguard-ckpt-ship", daemon=True)
        self._shipper.start()

    def reconnect(self, peer_addrs: Mapping[int, str] | None = None) -> None:
        """(Re)learn the peer and every backup server's address: at start and after a process group is
        re-created (a replacement's server is new). A collective when torch.distributed is up."""
        if self.cfg.peer and self.world_size > 1:
            self.node_of = _nodes(self.node) or {}
            self.peer = choose_peer(self.rank, world_size=self.world_size, tp=self.tp, pp=self.pp,
                                    node_of=self.node_of)
            self.addrs = _exchange_addresses(self.job, self.rank, self.server.address if self.server else "",
                                             peer_addrs)

    # ------------------------------------------------------------ the step

    def step(self, step: int, *, loss: float | None = None, grad_norm: float | None = None) -> bool:
        """Snapshot the state after optimizer step `step`; False if this step was not snapshotted."""
        if any(v is not None and not math.isfinite(v) for v in (loss, grad_norm)):
            if self.first_bad_step is None:
                self.first_bad_step = step
            return False
        if self.first_bad_step is not None or step % self.cfg.every:
            return False
        t0 = time.perf_counter()
        try:
            return self._snapshot(step)
        finally:
            spent = time.perf_counter() - t0
            self.stats["blocked_s"] += spent
            self.stats["launch_s"] += spent

    def _snapshot(self, step: int) -> bool:
        self.wait_copy()
        skeleton, tensors = flatten(get_state(self.model, self.optimizer))
        layout = self._prepare(tensors)
        slot = self._free_slot()
        if slot is None:
            self.stats["skipped_busy"] += 1
            return False
        self._ring.invalidate(slot)  # type: ignore[union-attr]
        self._copied.clear()
        buf = self._ring.buffers[slot]  # type: ignore[union-attr]
        if self._on_gpu and self._stream is not None:
            import torch

            self._stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self._stream):
                copy_in(buf, layout, tensors, non_blocking=True)
            done: Any = torch.cuda.Event()
            done.record(self._stream)
        else:
            done = None
        self._copier = threading.Thread(target=self._finish_copy, args=(slot, step, layout, skeleton, tensors, done),
                                        name="trainguard-ckpt-copy", daemon=True)
        self._copier.start()
        return True

    def _wait_before_update(self) -> None:
        t0 = time.perf_counter()
        self._copied.wait()
        spent = time.perf_counter() - t0
        self.stats["blocked_s"] += spent
        self.stats["wait_s"] += spent

    @property
    def pinned(self) -> bool:
        """Whether the slots are page-locked (the GPU path's copies then overlap the next step)."""
        return self._ring is not None and self._ring.pinned

    def wait_copy(self) -> None:
        """Block until the in-flight device->host copy is done (called before the optimizer mutates)."""
        self._copied.wait()

    def flush(self, timeout_s: float = 60.0) -> None:
        """Wait until the last snapshot is committed and every tier due for it is written."""
        deadline = time.monotonic() + timeout_s
        if self._copier is not None:
            self._copier.join(timeout=timeout_s)
        while time.monotonic() < deadline:
            with self._lock:
                if self._pending is None and not self._busy:
                    return
            time.sleep(0.005)

    # ------------------------------------------------------------ restore

    def sources(self) -> RestoreSources:
        holder = self.peer.peer if self.peer else None
        peer_addr = self.addrs.get(holder) if holder is not None else None
        return RestoreSources(job=self.job, rank=self.rank, own_dir=self.own_dir, disk_dir=self.cfg.disk_dir,
                              durable=self.cfg.durable, peer_addr=peer_addr)

    def restore(self, *, step: int | None = None, before: int | None = None, agree: bool = True,
                tiers: tuple[str, ...] = TIERS) -> Restored | None:
        """Load the newest step below `before` (or exactly `step`) from the best tier holding it.

        With `agree` and torch.distributed up, the ranks first agree on the
        newest step every one of them can load, and then check that every one
        did: a rank whose copies all fail their checksum sends everyone to the
        next older common step, so no rank ever resumes from a different step.
        """
        if self._copier is not None:
            self._copier.join()  # the newest snapshot is committed before we look for it
        src = self.sources()
        dist = _dist()
        if step is None and agree and dist is not None:
            restored = self._restore_agreed(src, before, tiers, dist)
        else:
            restored = restore_from(src, step=step, before=before, tiers=tiers)
        if restored is None:
            return None
        for tier, bad_step, why in restored.rejected:
            log.warning("rank %s: skipped the %s copy of step %s: %s", self.rank, tier, bad_step, why)
        load_state(self.model, self.optimizer, restored)
        self.forget_after(restored.step)
        self.first_bad_step = None
        self._announce(restored.step, restored.tier, restored.location, restored.checksum, status="restored")
        return restored

    @staticmethod
    def _restore_agreed(src: RestoreSources, before: int | None, tiers: tuple[str, ...], dist: Any,
                        attempts: int = 5) -> Restored | None:
        for _ in range(attempts):
            step = agree_step(src, before=before)
            if step is None:
                return None
            got = restore_from(src, step=step, tiers=tiers)
            ok: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(ok, got is not None)
            if all(ok):
                return got
            before = step  # some rank could not load it: everyone goes one common step further back
        return None

    def forget_after(self, step: int) -> None:
        """Forget this rank's copies of steps after `step`: training resumes from it, and those
        steps will be recomputed differently (a NaN rolled back, new code). A later restore must
        never mix them with the new timeline's copies of the same step numbers."""
        for m, path in read_slot_manifests(self.own_dir):
            if m.step > step:
                path.with_suffix(".json").unlink(missing_ok=True)
        with self._lock:
            self._slot_step = {i: s for i, s in self._slot_step.items() if s <= step}
        for root in (self.cfg.disk_dir, self.cfg.durable):
            if root:
                drop_rank_after(root, self.job, self.rank, step)
        self._last_done = dict.fromkeys(self._last_done, step)

    def close(self, *, purge: bool = False) -> None:
        """Stop the threads; `purge` also frees the RAM-backed slots (the job is over)."""
        if self._closed:
            return
        self._closed = True
        self.wait_copy()
        if self._copier is not None:
            self._copier.join(timeout=30)
        self._wake.set()
        self._shipper.join(timeout=30)
        if self._ring is not None:
            self._ring.close()
        if self.server is not None:
            self.server.close()
        if purge:
            import shutil

            shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------ internals

    def _prepare(self, tensors: list[Any]) -> Layout:
        """Reuse the buffers unless the state's shapes changed (the optimizer's first step)."""
        layout = plan_layout(tensors)
        if self._layout is None or self._layout.signature() != layout.signature() or self._ring is None:
            with self._lock:
                while self._busy:  # the shipper still reads an old-size buffer
                    self._lock.release()
                    time.sleep(0.005)
                    self._lock.acquire()
                if self._ring is not None:
                    self._ring.close()
                self._on_gpu = self._cudart is not None and any(local_tensor(t)[0].is_cuda for t in tensors)
                self._ring = SlotRing(self.own_dir, self.cfg.memory_slots, layout.nbytes,
                                      cudart=self._cudart if self._on_gpu else None)
                for i in range(self.cfg.memory_slots):
                    self._ring.invalidate(i)
                self._slot_step = {}
            self._layout = layout
        return self._layout

    def _free_slot(self) -> int | None:
        """A slot that is neither busy nor the newest complete copy; older history goes first."""
        with self._lock:
            newest = max(self._slot_step.values(), default=None)
            free = [i for i in range(self.cfg.memory_slots) if i not in self._busy
                    and (i not in self._slot_step or self._slot_step[i] != newest)]
            if not free:
                return None
            k = self.cfg.keep_every

            def keep_rank(i: int) -> tuple[int, int]:
                s = self._slot_step.get(i)
                if s is None:
                    return (0, 0)
                return (2 if k and s % k == 0 else 1, s)

            slot = min(free, key=keep_rank)
            self._busy.add(slot)
            self._slot_step.pop(slot, None)
            return slot

    def _finish_copy(self, slot: int, step: int, layout: Layout, skeleton: bytes, tensors: list[Any],
                     done: Any) -> None:
        ring = self._ring
        assert ring is not None
        try:
            if done is None:
                copy_in(ring.buffers[slot], layout, tensors)
            else:
                done.synchronize()
        finally:
            self._copied.set()  # the optimizer may now change the parameters
        del tensors
        m = Manifest(job=self.job, rank=self.rank, step=step, nbytes=layout.nbytes,
                     checksum=checksum(ring.buffers[slot], layout.nbytes), layout=layout.to_json(),
                     skeleton=base64.b64encode(skeleton).decode(), world_size=self.world_size)
        ring.commit(slot, m)
        with self._lock:
            for other, held in list(self._slot_step.items()):
                if held >= step and other not in self._busy:  # a copy from before a restore: abandoned
                    ring.invalidate(other)
                    del self._slot_step[other]
            self._slot_step[slot] = step
            self._busy.discard(slot)
        self.stats["snapshots"] += 1
        if self.cfg.announce_memory:
            self._announce(step, "memory", f"mem://{self.node}{self.own_dir}/slot{slot}", m.checksum)
        self._offer(slot, m)

    def _offer(self, slot: int, m: Manifest) -> None:
        """Hand the newest complete slot to the shipper, replacing any it has not started."""
        with self._lock:
            self._pending = (slot, m)
        self._wake.set()

    def _ship_loop(self) -> None:
        while not self._closed:
            self._wake.wait(0.5)
            self._wake.clear()
            with self._lock:
                job, self._pending = self._pending, None
                if job is None or job[0] in self._busy or self._slot_step.get(job[0]) != job[1].step:
                    continue
                self._busy.add(job[0])
            try:
                self._ship(*job)
            finally:
                with self._lock:
                    self._busy.discard(job[0])

    def _due(self, tier: str, every: int, step: int) -> bool:
        """Each time the step crosses a multiple of `every` (a skipped multiple is caught up at once)."""
        return every > 0 and step // every > self._last_done[tier] // every

    def _ship(self, slot: int, m: Manifest) -> None:
        assert self._ring is not None
        buf = self._ring.buffers[slot]
        if self.peer is not None and self._due("peer", self.cfg.peer_every, m.step):
            addr = self.addrs.get(self.peer.peer)
            try:
                reply = send_backup(addr, m, buf, max_bytes_per_s=self.cfg.peer_max_bytes_per_s) if addr else {}
            except OSError as exc:
                reply = {"ok": False, "error": str(exc)}
            if reply.get("ok"):
                self._last_done["peer"] = m.step
                self.stats["peer_sent"] += 1
                holder_node = self.node_of.get(self.peer.peer, f"rank{self.peer.peer}")
                self._announce(m.step, "peer", f"tcp://{addr}", m.checksum, node=holder_node)
            else:
                self.stats["peer_failed"] += 1
                log.warning("peer backup of step %s to rank %s failed: %s", m.step, self.peer.peer, reply.get("error"))
        if self.cfg.disk_dir and self._due("disk", self.cfg.disk_every, m.step):
            where = write_files(self.cfg.disk_dir, m, buf, keep=self.cfg.disk_keep)
            self._last_done["disk"] = m.step
            self._announce(m.step, "disk", where, m.checksum)
        if self.cfg.durable and self._due("durable", self.cfg.durable_every, m.step):
            where = write_files(self.cfg.durable, m, buf, keep=self.cfg.durable_keep)
            self._last_done["durable"] = m.step
            self._announce(m.step, "durable", where, m.checksum)

    def _announce(self, step: int, tier: str, location: str, digest: str, *, status: str = "saved",
                  node: str | None = None) -> None:
        if self.publisher is None:
            return
        self.publisher.publish(CheckpointEvent(
            ts=self._clock(), job=self.job, step=step, path=location, status=status,  # type: ignore[arg-type]
            rank=self.rank, tier=tier, checksum=digest, world_size=self.world_size,  # type: ignore[arg-type]
            node=node or self.node, code_version=self.code_version))


def _dist() -> Any:
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


def _nodes(node: str) -> dict[int, str] | None:
    dist = _dist()
    if dist is None:
        return None
    names: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(names, node)
    return {r: str(n) for r, n in enumerate(names)}


def _exchange_addresses(job: str, rank: int, mine: str, given: Mapping[int, str] | None) -> dict[int, str]:
    """Every rank's backup-server address: as given, else from TRAINGUARD_CHECKPOINT_PEERS, else all-gathered."""
    if given is not None:
        return dict(given)
    env = os.environ.get("TRAINGUARD_CHECKPOINT_PEERS")
    if env:
        import json

        return {int(k): str(v) for k, v in json.loads(env).items()}
    dist = _dist()
    if dist is None:
        return {rank: mine}
    addrs: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(addrs, mine)
    return {r: str(a) for r, a in enumerate(addrs)}


__all__ = ["CheckpointManager", "CheckpointConfig", "Restored", "set_state"]
