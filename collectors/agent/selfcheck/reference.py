"""The reference computations every machine must reproduce bit for bit.

Weights and inputs come from fixed seeds, so healthy machines produce
identical bytes; a machine whose digest differs is computing wrongly. The
replay uses integer-valued float64 data so that a gradient summed over any
grouping of shards is exact, hence identical for every group, whatever its
size. Fault injection (`TRAINGUARD_SELFCHECK_FAULT="node:kind,..."`) lives
here too, next to what it perturbs, so tests can make one "machine" flip a
bit or hang.
"""

from __future__ import annotations

import hashlib
import os

import torch

FAULT_ENV = "TRAINGUARD_SELFCHECK_FAULT"
BATCH = 24


def faults_for(machine: str, env: dict[str, str] | None = None) -> set[str]:
    """The fault kinds injected into `machine` ("hang", "bitflip").

    >>> sorted(faults_for("n2", {FAULT_ENV: "n2:bitflip,n1:hang"}))
    ['bitflip']
    """
    spec = (env if env is not None else os.environ).get(FAULT_ENV, "")
    out = set()
    for item in filter(None, (s.strip() for s in spec.split(","))):
        node, _, kind = item.partition(":")
        if node == machine:
            out.add(kind or "bitflip")
    return out


def digest(tensor: torch.Tensor) -> str:
    """SHA-256 of the tensor's raw bytes: equality means bitwise equality."""
    return hashlib.sha256(tensor.detach().contiguous().cpu().numpy().tobytes()).hexdigest()


def reference_step(*, perturb: bool = False) -> torch.Tensor:
    """One forward/backward/update of a small MLP on fixed weights and inputs."""
    gen = torch.Generator().manual_seed(1234)
    w1 = torch.randn(64, 128, generator=gen, requires_grad=True)
    w2 = torch.randn(128, 16, generator=gen, requires_grad=True)
    x = torch.randn(32, 64, generator=gen)
    y = torch.randn(32, 16, generator=gen)
    loss = ((torch.tanh(x @ w1) @ w2 - y) ** 2).mean()
    loss.backward()
    assert w1.grad is not None and w2.grad is not None
    out = torch.cat([(w1 - 0.01 * w1.grad).flatten(), (w2 - 0.01 * w2.grad).flatten()]).detach()
    if perturb:
        out[7] = torch.nextafter(out[7], torch.tensor(float("inf")))  # one ulp: invisible to a tolerance check
    return out


def replay_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Integer-valued weights, inputs and targets of the replayed step."""
    gen = torch.Generator().manual_seed(99)
    w = torch.randint(-3, 4, (8, 4), generator=gen).double()
    x = torch.randint(-3, 4, (BATCH, 8), generator=gen).double()
    y = torch.randint(-3, 4, (BATCH, 4), generator=gen).double()
    return w, x, y


def shard_gradient(index: int, count: int, *, perturb: bool = False) -> torch.Tensor:
    """The gradient contribution of shard `index` of `count` (exact in float64)."""
    w, x, y = replay_data()
    rows = torch.arange(BATCH)[index::count]
    xs, ys = x[rows], y[rows]
    grad = xs.T @ (xs @ w - ys)
    if perturb:
        grad[0, 0] += 1.0
    return grad


def full_gradient() -> torch.Tensor:
    """What every healthy group's summed gradient must equal."""
    return shard_gradient(0, 1)
