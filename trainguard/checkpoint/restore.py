"""Loading a rank's state back from the best tier that holds a good copy.

Tiers are tried fastest first: own memory (RAM-backed slots, surviving a
process restart), local disk, the peer's memory (the only copy left when the
machine itself was replaced), then the durable store. Every candidate's
checksum is recomputed before it is used; a corrupt or truncated copy is
recorded in `rejected` and the next one is tried.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainguard.checkpoint.layout import flatten, plan_layout, unflatten
from trainguard.checkpoint.peer import fetch_backup, list_backups
from trainguard.checkpoint.state import get_state, set_state
from trainguard.checkpoint.store import Manifest, list_rank_steps, load_verified, read_files, read_slot_manifests

TIERS: tuple[str, ...] = ("memory", "disk", "peer", "durable")


@dataclass(frozen=True)
class RestoreSources:
    """Where one rank's copies may be."""

    job: str
    rank: int
    own_dir: Path
    disk_dir: str | None = None
    durable: str | None = None
    peer_addr: str | None = None


@dataclass
class Restored:
    """A verified copy of one rank's state, and where it came from."""

    step: int
    tier: str
    location: str
    checksum: str
    manifest: Manifest
    payload: Any  # uint8 tensor over the verified bytes
    rejected: list[tuple[str, int, str]] = field(default_factory=list)


def local_steps(src: RestoreSources) -> dict[int, list[str]]:
    """step -> tiers that claim to hold it (unverified; cheap: manifests and listings only)."""
    out: dict[int, list[str]] = {}
    for m, _ in read_slot_manifests(src.own_dir):
        out.setdefault(m.step, []).append("memory")
    for tier, root in (("disk", src.disk_dir), ("durable", src.durable)):
        if root:
            for s in list_rank_steps(root, src.job, src.rank):
                out.setdefault(s, []).append(tier)
    if src.peer_addr:
        for s in list_backups(src.peer_addr, src.job, src.rank):
            out.setdefault(s, []).append("peer")
    return out


def agree_step(src: RestoreSources, *, before: int | None = None) -> int | None:
    """The newest step below `before` that every rank can load (a collective over the default group)."""
    import torch.distributed as dist

    mine = sorted(s for s in local_steps(src) if before is None or s < before)
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    common = set(every[0]).intersection(*every[1:]) if every else set()
    return max(common) if common else None


def _candidates(src: RestoreSources, tier: str, step: int | None,
                before: int | None) -> list[tuple[Manifest, Any, str]]:
    def ok(s: int) -> bool:
        return (step is None or s == step) and (before is None or s < before)

    if tier == "memory":
        out = []
        for m, path in sorted(read_slot_manifests(src.own_dir), key=lambda mp: -mp[0].step):
            if ok(m.step):
                out.append((m, path, f"mem://{path}"))  # read only if it is the one used
        return out
    if tier == "peer":
        if not src.peer_addr:
            return []
        try:
            got = fetch_backup(src.peer_addr, src.job, src.rank, step=step, before=before)
        except OSError:
            return []
        return [(got[0], got[1], f"tcp://{src.peer_addr}")] if got else []
    root = src.disk_dir if tier == "disk" else src.durable
    if not root:
        return []
    return [(m, data, f"{root}/{src.job}/step-{m.step:08d}") for m, data in
            read_files(root, src.job, src.rank, step=step, before=before)]


def restore_from(src: RestoreSources, *, step: int | None = None, before: int | None = None,
                 tiers: tuple[str, ...] = TIERS) -> Restored | None:
    """The first verified copy, trying tiers in order; newest step first within `before`."""
    rejected: list[tuple[str, int, str]] = []
    best: Restored | None = None
    for tier in tiers:
        for m, payload, where in _candidates(src, tier, step, before):
            if m.rank != src.rank or m.job != src.job:
                rejected.append((tier, m.step, f"holds rank {m.rank} of {m.job}"))
                continue
            if best is not None and m.step <= best.step:
                break
            data = load_verified(m, payload)
            if data is None:
                rejected.append((tier, m.step, "checksum mismatch or truncated"))
                continue
            best = Restored(m.step, tier, where, m.checksum, m, data)
            break
        if best is not None and (step is not None or best.tier == "memory"):
            break  # an exact step found, or own memory already holds the newest copy there is
    if best is not None:
        best.rejected = rejected
    return best


def load_state(model: Any, optimizer: Any, restored: Restored) -> None:
    """Put a verified copy into the live model and optimizer.

    When the live state has the snapshot's exact layout (an in-process
    restart) every tensor is copied straight into place, with no
    intermediate copies; otherwise (a fresh process, whose optimizer has no
    state yet) plain tensors are rebuilt and loaded, shards always in place.
    """
    _, template = flatten(get_state(model, optimizer))
    layout = restored.manifest.layout_obj()
    in_place = plan_layout(template).signature() == layout.signature()
    state = unflatten(restored.manifest.skeleton_bytes(), restored.payload, layout, template, in_place=in_place)
    set_state(model, optimizer, state)
