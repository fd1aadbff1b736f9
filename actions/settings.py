"""The `actions:` section of the config.

Every safety rail is a setting, so an operator can tighten a rail without a
code change: how much of a job or fleet may be evicted in a window, how
long a node rests after an action, which kinds wait for a human.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class KubernetesSettings(BaseModel):
    """How the Kubernetes executor reaches the API server."""

    model_config = ConfigDict(extra="forbid")

    kubeconfig: str = Field("", description="path to a kubeconfig; empty means in-cluster config")
    host: str = Field("", description="API server URL override (tests point this at a fake)")
    taint_key: str = "trainguard.io/evicted"
    pod_label_selector: str = Field("", description="only evict pods matching this selector")


class SlurmSettings(BaseModel):
    """How the Slurm executor calls scontrol."""

    model_config = ConfigDict(extra="forbid")

    scontrol: str = "scontrol"
    timeout_s: float = Field(30.0, gt=0)


class ActionSettings(BaseModel):
    """How incidents become actions."""

    model_config = ConfigDict(extra="forbid")

    dry_run: bool = False
    executor: str = Field("local", pattern="^(local|kubernetes|slurm)$")
    group_id: str = "trainguard-actions"
    state_dir: Path = Field(Path(".trainguard/actions"), description="journal of decisions and plan steps")
    breaker_max_fraction: float = Field(0.25, gt=0, le=1, description="max fraction of nodes evicted per window")
    breaker_window_s: float = Field(3600.0, gt=0)
    fleet_size: int = Field(0, ge=0, description="nodes in the fleet; 0 = only per-job limits")
    cooldown_s: float = Field(600.0, ge=0, description="min seconds between actions on one node")
    approval_kinds: list[str] = Field(default_factory=list, description="incident kinds that wait for approval")
    standby_nodes: list[str] = Field(default_factory=list, description="pre-checked warm spare nodes")
    command_timeout_s: float = Field(120.0, gt=0, description="how long to wait for agents' results")
    retry_window_s: float = Field(3600.0, gt=0, description="a second unknown fault within this escalates")
    network_confirmations: int = Field(2, ge=1, description="network anomalies needed before evicting")
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
