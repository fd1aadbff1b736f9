"""The `collectors:` section of the config."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class CollectorSettings(BaseModel):
    """What `trainguard collect` runs on a node, and how often."""

    node: str = Field("", description="node name; empty means NODE_NAME or the hostname")
    gpu_interval_s: float = Field(1.0, gt=0)
    rdma_interval_s: float = Field(1.0, gt=0)
    spool_dir: Path = Path(".trainguard/spool")
    spool_max_mb: float = Field(256.0, gt=0)
