"""How a state dict lies in one flat byte buffer, and the checksum over it.

A snapshot is a *skeleton* (the state dict with every tensor replaced by a
numbered reference, serialised with msgpack so a peer's bytes are never
unpickled) plus one contiguous payload holding every tensor's bytes at a
64-byte aligned offset. The layout is computed once per state-dict shape and
the payload buffer is reused every step: no allocation on the hot path.

Sharded state (FSDP2 `DTensor`, `torch.distributed.checkpoint` state dicts)
is stored as each rank's *local* shard; restoring copies the bytes back into
the live model's own sharded tensors, so a rank only ever holds its shard.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import msgspec

ALIGN = 64
CHUNK = 1 << 20  # checksum granularity: one 64-bit sum per MiB


class LayoutError(ValueError):
    """A snapshot does not fit the state it is restored into."""


@dataclass(frozen=True)
class TensorSpec:
    """Where one tensor's bytes lie in the payload."""

    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    sharded: bool = False


@dataclass(frozen=True)
class Layout:
    """The payload's size and every tensor's place in it."""

    specs: tuple[TensorSpec, ...]
    nbytes: int

    def signature(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        return tuple((s.dtype, s.shape) for s in self.specs)

    def to_json(self) -> list[list[Any]]:
        return [[s.dtype, list(s.shape), s.offset, s.nbytes, s.sharded] for s in self.specs]

    @classmethod
    def from_json(cls, rows: list[list[Any]], nbytes: int) -> Layout:
        return cls(tuple(TensorSpec(r[0], tuple(r[1]), r[2], r[3], bool(r[4])) for r in rows), nbytes)


def local_tensor(t: Any) -> tuple[Any, bool]:
    """The bytes a rank owns of `t`: its local shard for a DTensor, else `t` itself."""
    to_local = getattr(t, "to_local", None)
    if to_local is not None and type(t).__name__ == "DTensor":
        return to_local(), True
    return t, False


def flatten(state: Any) -> tuple[bytes, list[Any]]:
    """(msgpack skeleton, tensors in skeleton order). Tuples come back as lists."""
    import torch

    tensors: list[Any] = []

    def walk(obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            tensors.append(obj)
            return {"__tg_tensor__": len(tensors) - 1}
        if isinstance(obj, dict):
            return {k: walk(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [walk(v) for v in obj]
        return obj

    return msgspec.msgpack.encode(walk(state)), tensors


def plan_layout(tensors: list[Any]) -> Layout:
    """Aligned offsets for `tensors` (their local shards)."""
    specs, offset = [], 0
    for t in tensors:
        local, sharded = local_tensor(t)
        nbytes = local.numel() * local.element_size()
        specs.append(TensorSpec(str(local.dtype).removeprefix("torch."), tuple(local.shape), offset, nbytes, sharded))
        offset += -(-nbytes // ALIGN) * ALIGN
    return Layout(tuple(specs), max(offset, ALIGN))


def view(buffer: Any, spec: TensorSpec) -> Any:
    """The tensor `spec` describes, viewed (not copied) inside a uint8 `buffer`."""
    import torch

    dtype = getattr(torch, spec.dtype)
    return buffer[spec.offset:spec.offset + spec.nbytes].view(dtype).view(spec.shape)


def copy_in(buffer: Any, layout: Layout, tensors: list[Any], *, non_blocking: bool = False) -> None:
    """Copy every tensor's local bytes into its slot of `buffer` (GPU -> host is async when pinned)."""
    for t, spec in zip(tensors, layout.specs, strict=True):
        view(buffer, spec).copy_(local_tensor(t)[0].detach(), non_blocking=non_blocking)


def unflatten(skeleton: bytes, buffer: Any, layout: Layout, template: list[Any] | None = None, *,
              in_place: bool = False) -> Any:
    """Rebuild the state dict. Tensors are copied out of `buffer` (it will be reused).

    A sharded tensor is written into the matching tensor of `template` (the
    live model's state, flattened the same way) so it keeps its mesh and
    placement; with `in_place` every tensor is; otherwise plain tensors are
    fresh CPU copies.
    """

    def walk(obj: Any) -> Any:
        if isinstance(obj, dict):
            if "__tg_tensor__" in obj and len(obj) == 1:
                return _tensor(int(obj["__tg_tensor__"]))
            return {k: walk(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [walk(v) for v in obj]
        return obj

    def _tensor(i: int) -> Any:
        spec = layout.specs[i]
        data = view(buffer, spec)
        if not spec.sharded and not in_place:
            return data.clone()
        if template is None or i >= len(template):
            raise LayoutError(f"tensor {i} is a shard; restoring it needs the live sharded state as a template")
        live, _ = local_tensor(template[i])
        if tuple(live.shape) != spec.shape:
            raise LayoutError(f"shard {i} has shape {spec.shape}, the live shard {tuple(live.shape)}")
        live.detach().copy_(data)
        return template[i]

    return walk(msgspec.msgpack.decode(skeleton, strict=False))


def checksum(buffer: Any, nbytes: int) -> str:
    """A fast digest of the payload: one wrapping 64-bit sum per MiB, hashed.

    It catches what a copy goes wrong with (flipped bits, torn or truncated
    writes, a chunk from another step) at memory speed, which a cryptographic
    hash over 200 MB every step would not; authenticity is not its job.
    """
    import numpy as np
    import torch

    data = buffer[:nbytes] if isinstance(buffer, torch.Tensor) else torch.frombuffer(buffer, dtype=torch.uint8)[:nbytes]
    arr = data.numpy()
    whole = (nbytes // CHUNK) * CHUNK
    sums = arr[:whole].view(np.uint64).reshape(-1, CHUNK // 8).sum(axis=1, dtype=np.uint64) if whole else \
        np.zeros(0, dtype=np.uint64)
    tail = arr[whole:nbytes]
    digest = hashlib.blake2b(sums.tobytes(), digest_size=16)
    digest.update(tail.tobytes())
    digest.update(nbytes.to_bytes(8, "little"))
    return digest.hexdigest()
