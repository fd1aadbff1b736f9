"""The checkpoint manager's knobs: how often each tier is written, and the bounds on memory and network."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class CheckpointConfig(BaseModel):
    """Every tier's cadence and budget. Memory needed per rank:
    (memory_slots + 2 if peer else memory_slots) x the rank's state size (see docs/recovery.md).
    """

    model_config = ConfigDict(extra="forbid")

    every: int = Field(1, ge=1, description="tier (a): snapshot into own CPU memory every k steps")
    memory_slots: int = Field(2, ge=2, description="reusable buffers; 2 = double buffering")
    keep_every: int = Field(0, ge=0, description="with > 2 slots, keep steps that are multiples of this "
                                                  "longer, so an SDC found late still has a clean copy")
    memory_dir: str | None = Field(None, description="RAM-backed directory for the slots (default /dev/shm)")
    peer: bool = Field(True, description="tier (b): back each snapshot up to a peer's CPU memory")
    peer_every: int = Field(1, ge=1)
    peer_max_bytes_per_s: float = Field(0.0, ge=0, description="cap on backup traffic, 0 = none")
    host: str = Field("127.0.0.1", description="address the backup server binds and advertises")
    port: int = Field(0, ge=0, le=65535, description="backup server port, 0 = any free one")
    disk_dir: str | None = Field(None, description="tier (c): local disk directory")
    disk_every: int = Field(0, ge=0, description="steps between disk copies, 0 = off")
    disk_keep: int = Field(2, ge=1)
    durable: str | None = Field(None, description="tier (d): directory or fsspec URL")
    durable_every: int = Field(0, ge=0, description="steps between durable copies, 0 = off")
    durable_keep: int = Field(2, ge=1)
    announce_memory: bool = Field(True, description="announce every in-memory snapshot on the topic")
