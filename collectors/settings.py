"""The `collectors:` section of the config (node collectors and the on-node agent)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from trainguard.schemas.kafka_config import BrokerSettings, TopicSettings
from trainguard.schemas.keys import SecuritySettings


class AgentSettings(BaseModel):
    """`trainguard run`: the on-node agent that supervises training processes."""

    model_config = ConfigDict(extra="forbid")

    state_dir: Path = Field(Path(".trainguard/agent"), description="executed command ids, attempt, stack dumps")
    grace_s: float = Field(30.0, gt=0, description="SIGTERM -> SIGKILL grace when stopping the training process")
    linger_s: float = Field(600.0, ge=0, description="after a failed exit, wait this long for a restart command")
    selfcheck_command: list[str] = Field(default_factory=lambda: ["trainguard", "selfcheck"],
                                         description="argv run for self_check / replay_regroup commands")
    selfcheck_timeout_s: float = Field(600.0, gt=0)
    stack_timeout_s: float = Field(5.0, gt=0)
    hang_suspect_s: float = Field(300.0, ge=0, description="sample stacks when a process's step has not moved "
                                  "for this long while training (0 disables)")
    hang_stack_every_s: float = Field(60.0, gt=0, description="stack sampling period during a suspected hang")


class CollectorSettings(BaseModel):
    """What `trainguard collect` runs on a node, and how often."""

    model_config = ConfigDict(extra="forbid")

    node: str = Field("", description="node name; empty means NODE_NAME or the hostname")
    gpu_interval_s: float = Field(1.0, gt=0)
    rdma_interval_s: float = Field(1.0, gt=0)
    log_interval_s: float = Field(1.0, gt=0)
    spool_dir: Path = Path(".trainguard/spool")
    spool_max_mb: float = Field(256.0, gt=0)
    spool_sync: str = Field("process", pattern="^(process|always)$",
                            description="write-ahead durability: 'process' survives a killed collector, "
                            "'always' also a power cut (an fsync per record)")
    gpu: bool = Field(True, description="enable the GPU collector (its source: `gpu_source`)")
    gpu_source: str = Field("nvml", pattern="^(nvml|dcgm-exporter)$",
                            description="where GPU readings come from: 'nvml' (open the GPUs) or 'dcgm-exporter' "
                            "(scrape the exporter already on the node: no NVML, no privilege)")
    dcgm_exporter_url: str = Field("http://localhost:9400/metrics", pattern="^https?://",
                                   description="dcgm-exporter's metrics URL (gpu_source: dcgm-exporter)")
    dcgm_exporter_timeout_s: float = Field(5.0, gt=0, description="a scrape taking longer leaves the node "
                                           "unobserved for that interval")
    rdma: bool = Field(True, description="enable the RDMA sysfs collector")
    kernel_log: bool = Field(True, description="follow /dev/kmsg for XID/driver lines")
    nvml_timeout_s: float = Field(5.0, gt=0, description="an NVML read taking longer is reported as hung")
    npd: bool = Field(False, description="read the conditions and events node-problem-detector sets on this "
                      "node (Kubernetes API: get nodes/status, list events)")
    npd_interval_s: float = Field(10.0, gt=0)
    kube_host: str = Field("", description="Kubernetes API URL for the NPD watcher (empty: kubeconfig, else "
                           "the in-cluster service account)")
    kubeconfig: str = ""
    rdma_root: Path = Path("/sys/class/infiniband")
    kernel_log_path: Path = Path("/dev/kmsg")
    log_files: list[Path] = Field(default_factory=list, description="training log files to follow")
    agent: AgentSettings = Field(default_factory=AgentSettings)


class AgentConfig(Protocol):
    """The sections the on-node agent reads (`trainguard.settings.Settings` satisfies it)."""

    @property
    def broker(self) -> BrokerSettings: ...

    @property
    def topics(self) -> TopicSettings: ...

    @property
    def collectors(self) -> CollectorSettings: ...

    @property
    def security(self) -> SecuritySettings: ...
