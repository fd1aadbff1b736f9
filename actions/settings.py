"""The `actions:` section of the config.

Every safety rail is a setting, so an operator can tighten a rail without a
code change: how much of a job or fleet may be evicted in a window, how
long a node rests after an action, which kinds wait for a human.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trainguard.actions.executors.names import LOCAL, check_names, expand_legacy
from trainguard.actions.lemons import DEFAULT_KINDS, DEFAULT_LOCALISED, LemonPolicy
from trainguard.actions.rollout import Mode, RolloutPolicy
from trainguard.actions.verdicts import VerdictPolicy
from trainguard.schemas.kinds import ANOMALY_KINDS


class KubernetesSettings(BaseModel):
    """How the Kubernetes executor reaches the API server."""

    model_config = ConfigDict(extra="forbid")

    kubeconfig: str = Field("", description="path to a kubeconfig; empty means in-cluster config")
    host: str = Field("", description="API server URL override (tests point this at a fake)")
    taint_key: str = "trainguard.io/evicted"
    pod_label_selector: str = Field("", description="only evict pods matching this selector")
    namespaces: list[str] = Field(default_factory=list, description="evict only pods of these namespaces "
                                  "(namespaced RBAC); empty means every namespace (a cluster-wide pod list)")
    event_namespace: str = Field("default", description="where Events about Nodes are recorded")
    eviction_timeout_s: float = Field(300.0, gt=0, description="how long a drain may wait on PDBs and "
                                      "terminating pods before the action fails")


class SlurmSettings(BaseModel):
    """How the Slurm executor calls scontrol."""

    model_config = ConfigDict(extra="forbid")

    scontrol: str = "scontrol"
    timeout_s: float = Field(30.0, gt=0)


class LemonSettings(BaseModel):
    """When a node is a lemon and stays out of the standby pool until an operator releases it (actions.lemons)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    incidents: int = Field(3, ge=1, description="distinct incidents of a lemon kind within window_s (any jobs, "
                           "any attempts) that quarantine a node")
    window_s: float = Field(604800.0, gt=0, description="how far back incidents and failed self-checks count "
                            "(act's clock)")
    failed_selfchecks: int = Field(2, ge=1, description="failed self-checks within window_s that quarantine a node")
    kinds: list[str] = Field(default_factory=lambda: list(DEFAULT_KINDS), description="incident kinds that "
                             "implicate every node they name (faults of the machine itself)")
    localised_kinds: list[str] = Field(default_factory=lambda: list(DEFAULT_LOCALISED), description="kinds that "
                                       "implicate a node only when the incident names that one node alone")

    @field_validator("kinds", "localised_kinds")
    @classmethod
    def _known(cls, kinds: list[str]) -> list[str]:
        unknown = [k for k in kinds if k not in ANOMALY_KINDS]
        if unknown:
            raise ValueError(f"unknown incident kind(s) {', '.join(unknown)}; known: {', '.join(ANOMALY_KINDS)}")
        return kinds

    def policy(self) -> LemonPolicy:
        """The pure policy `actions.lemons` decides with."""
        return LemonPolicy(incidents=self.incidents, window_s=self.window_s, failed_selfchecks=self.failed_selfchecks,
                           kinds=tuple(self.kinds), localised_kinds=tuple(self.localised_kinds), enabled=self.enabled)


class SelfCheckSettings(BaseModel):
    """How a stop-time self-check fans out over the machines' agents (actions.selfcheck.fanout)."""

    model_config = ConfigDict(extra="forbid")

    rendezvous_host: str = Field("{node}", description="address of the check's rank 0 (on the first machine "
                                 "checked); {node} is that machine's node name, e.g. '{node}.train.svc'")
    rendezvous_port: int = Field(29600, ge=1, le=65535, description="first TCP port of the check's rendezvous "
                                 "(clear of torchrun's 29400 and 29500 defaults: training may still run)")
    rendezvous_ports: int = Field(64, ge=1, le=4096, description="ports from rendezvous_port on, one picked per "
                                  "check id, so two jobs' checks on one machine do not collide")
    procs_per_machine: int = Field(2, ge=1, description="check ranks each machine's agent starts")
    collective_timeout_s: float = Field(10.0, gt=0, description="one collective's timeout within the check")
    budget_s: float = Field(300.0, gt=0, description="deadline for every agent's report (capped below "
                            "command_timeout_s); a machine silent by then is named")

    @model_validator(mode="after")
    def _ports_fit(self) -> SelfCheckSettings:
        if self.rendezvous_port + self.rendezvous_ports - 1 > 65535:
            raise ValueError(f"rendezvous_port {self.rendezvous_port} + rendezvous_ports {self.rendezvous_ports} "
                             "runs past port 65535")
        return self


class RolloutSettings(BaseModel):
    """How far act may go on its own (actions.rollout): observe, approve or auto, per kind and per rule.

    A new install observes everything: it decides and journals what it would have
    done, and sends nothing, until an operator promotes a kind (here, or at run time
    with a signed set_rollout command from the console).
    """

    model_config = ConfigDict(extra="forbid")

    default: Mode = Field("observe", description="mode of every kind and rule not named below")
    kinds: dict[str, Mode] = Field(default_factory=dict, description="mode per incident kind, e.g. "
                                   "{hw_fault: auto, network: approve}")
    rules: dict[str, Mode] = Field(default_factory=dict, description="mode per rule (beats its kind's), e.g. "
                                   "{network.confirmed_evict: observe}")

    precision_window_s: float = Field(30 * 86400.0, gt=0, description="operators' verdicts given within this "
                                      "window make each rule's and detector's precision (trainguard_rule_precision)")
    precision_floor: float = Field(0.8, ge=0, le=1, description="a rule in auto whose precision falls below this "
                                   "raises TrainguardRulePrecisionLow (and is audited rule_precision_low)")
    precision_min_verdicts: int = Field(5, ge=1, description="true/false verdicts a rule needs before its "
                                        "precision can raise that alert")

    @field_validator("kinds")
    @classmethod
    def _known_kinds(cls, kinds: dict[str, Mode]) -> dict[str, Mode]:
        unknown = sorted(set(kinds) - set(ANOMALY_KINDS))
        if unknown:  # a misspelt kind would silently stay in the default mode
            raise ValueError(f"unknown incident kind(s) {', '.join(unknown)} (known: {', '.join(ANOMALY_KINDS)})")
        return kinds

    def policy(self) -> RolloutPolicy:
        """The configured policy (operator changes are journaled and applied over it)."""
        return RolloutPolicy(self.default, dict(self.kinds), dict(self.rules))

    def verdict_policy(self) -> VerdictPolicy:
        """How operators' verdicts are judged (actions.verdicts)."""
        return VerdictPolicy(self.precision_window_s, self.precision_floor, self.precision_min_verdicts)


class ActionSettings(BaseModel):
    """How incidents become actions."""

    model_config = ConfigDict(extra="forbid")

    dry_run: bool = False
    executors: list[str] = Field(default_factory=list, description="enabled executors in priority order: each "
                                 "action goes to the first that handles it, e.g. [kubernetes, local]; a plan with "
                                 "an action none handles fails before it starts. Empty: [local] (or `executor`)")
    executor: str = Field("", description="older form: one executor for evictions plus the node agents "
                          "(`kubernetes` = executors [kubernetes, local]); set executors or executor, not both")
    group_id: str = "trainguard-actions"
    state_dir: Path = Field(Path(".trainguard/actions"), description="journal of decisions and plan steps")
    state_topic: bool = Field(True, description="mirror the journal on the compacted act-state topic (and "
                              "rebuild from it at start), so act can move to another machine; off: the "
                              "local journal only")
    breaker_max_fraction: float = Field(0.25, gt=0, le=1, description="max fraction of nodes evicted per window")
    breaker_window_s: float = Field(3600.0, gt=0)
    fleet_size: int = Field(0, ge=0, description="nodes in the fleet; 0 = unknown, fleet_max_evictions applies")
    fleet_max_evictions: int = Field(4, ge=1, description="nodes evicted/cordoned per window fleet-wide when "
                                     "fleet_size is unknown (never off)")
    min_job_size: int = Field(4, ge=1, description="a job whose size is unknown counts as this many nodes "
                              "for the breaker")
    max_jobs: int = Field(4096, ge=1, description="jobs remembered (checkpoints, topology, attempts); "
                          "the least recently seen is forgotten, and counted")
    cooldown_s: float = Field(600.0, ge=0, description="min seconds between actions on one node")
    approval_kinds: list[str] = Field(default_factory=list, description="incident kinds that wait for approval "
                                      "(the older form of rollout mode approve; such a kind never goes past it)")
    rollout: RolloutSettings = Field(default_factory=RolloutSettings)
    standby_nodes: list[str] = Field(default_factory=list, description="pre-checked warm spare nodes")
    operator_max_age_s: float = Field(300.0, gt=0, description="console operator commands older than this are "
                                      "refused (a re-read topic must not re-apply old ones)")
    command_timeout_s: float = Field(120.0, gt=0, description="how long to wait for agents' results")
    record_skew_s: float = Field(600.0, gt=0, description="an incident dated farther than this from act's clock "
                                 "is audited (record_clock_skew); breaker windows and cooldowns run on act's "
                                 "clock only, so no record's date can open or close one")
    retry_window_s: float = Field(3600.0, gt=0, description="a second unknown fault within this escalates")
    network_confirmations: int = Field(2, ge=1, description="network anomalies needed before evicting")
    plan_workers: int = Field(4, ge=1, description="plans (of different jobs) executed at once")
    commit_interval_s: float = Field(0.5, gt=0, description="commit consumed offsets at most this often, "
                                     "each time once the state they imply is journaled and on act-state")
    state_wait_s: float = Field(2.0, ge=0, description="before deciding, wait at most this long for the "
                                "checkpoint/training topics to be read up to the incident")
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    selfcheck: SelfCheckSettings = Field(default_factory=SelfCheckSettings)
    lemons: LemonSettings = Field(default_factory=LemonSettings)

    @field_validator("executors")
    @classmethod
    def _registered(cls, names: list[str]) -> list[str]:
        return check_names(names) if names else names

    @field_validator("executor")
    @classmethod
    def _registered_one(cls, name: str) -> str:
        return check_names([name])[0] if name else name

    @model_validator(mode="after")
    def _one_form(self) -> ActionSettings:
        if self.executors and self.executor:
            raise ValueError("set actions.executors or the older actions.executor, not both")
        return self

    def enabled_executors(self) -> list[str]:
        """The executors act enables, in priority order (`executors`, else `executor` expanded, else local)."""
        return list(self.executors) or (expand_legacy(self.executor) if self.executor else [LOCAL])
