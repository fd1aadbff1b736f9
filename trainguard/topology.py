"""Where a training process sits: rank, world size, node, and its (dp, tp, pp) coordinates.

Launchers announce this in the environment, each in its own spelling:
torchrun (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`), Slurm (`SLURM_PROCID`,
`SLURM_NTASKS`, `SLURM_LOCALID`, `SLURMD_NODENAME`) and Kubernetes (the
downward API's `NODE_NAME`, `POD_NAME`). An initialised torch.distributed
process group wins over all of them, since it is what the job really uses.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Placement:
    """One process's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    node: str
    pod: str = ""


def node_name(env: Mapping[str, str] | None = None) -> str:
    """The node this process runs on: Kubernetes, then Slurm, then the hostname.

    >>> node_name({"NODE_NAME": "gpu-17"})
    'gpu-17'
    """
    env = os.environ if env is None else env
    return env.get("NODE_NAME") or env.get("SLURMD_NODENAME") or socket.gethostname()


def placement_from_env(env: Mapping[str, str] | None = None) -> Placement:
    """Rank and world size from torchrun or Slurm variables (single process if neither).

    >>> placement_from_env({"SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_LOCALID": "3", "NODE_NAME": "n1"})
    Placement(rank=3, world_size=8, local_rank=3, node='n1', pod='')
    """
    env = os.environ if env is None else env

    def first(*names: str, default: int) -> int:
        for name in names:
            if env.get(name, "").strip().lstrip("-").isdigit():
                return int(env[name])
        return default

    return Placement(
        rank=first("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", default=0),
        world_size=first("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", default=1),
        local_rank=first("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", default=0),
        node=node_name(env),
        pod=env.get("POD_NAME", ""),
    )


def placement(env: Mapping[str, str] | None = None, dist: Any = None) -> Placement:
    """`placement_from_env`, overridden by torch.distributed when it is initialised."""
    found = placement_from_env(env)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return Placement(rank=dist.get_rank(), world_size=dist.get_world_size(),
                         local_rank=found.local_rank, node=found.node, pod=found.pod)
    return found


def coordinates(rank: int, *, world_size: int, tp: int = 1, pp: int = 1) -> tuple[int, int, int]:
    """(dp, tp, pp) indices of `rank`, Megatron's default order (tp fastest, then dp, then pp).

    Replicas with the same (tp, pp) must hold identical parameters, which is
    what the SDC checksum comparison relies on.

    >>> coordinates(5, world_size=8, tp=2, pp=2)
    (0, 1, 1)
    """
    if tp < 1 or pp < 1 or world_size % (tp * pp):
        raise ValueError(f"world_size {world_size} is not divisible by tp*pp = {tp}*{pp}")
    dp_size = world_size // (tp * pp)
    return (rank // tp) % dp_size, rank % tp, rank // (tp * dp_size)
