"""What each action is told: one typed parameter struct per row of the action table.

A step's parameters used to travel from the engine through the runner and
the executors to the node agents as a dict, about 25 keys spelt by hand at
each end; a misspelt key was silently a default. Here each kind of action
has its struct, and `PlannedAction.params` / `ActionCommand.params` are a
tagged union of them (`kind` on the wire): an unknown field, a wrong type or
parameters of another action fail when the record is built or decoded, and
so reach the dead-letter topic instead of an agent.

Which struct an action takes is the `params` column of `schemas.actions`;
a step written without parameters gets its action's defaults. Fields the
runner adds when it sends a step (`exclude_nodes`, `standby`, `attempt`,
`machines`) are filled by `restarting` / `on_machines`, never by the engine.
"""

from __future__ import annotations

from typing import Self

import msgspec


class Params(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True, omit_defaults=True,
             tag_field="kind", gc=False):
    """What every action carries: why it was planned (a taint, a Slurm reason, the console, the audit)."""

    reason: str = ""

    def restarting(self, *, exclude_nodes: list[str], standby: dict[str, str], attempt: int) -> Self:
        """These parameters as a restart sends them; only `Restart` has anything to add."""
        return self

    def on_machines(self, machines: list[str]) -> Self:
        """These parameters as a diagnosis over `machines` sends them; only diagnoses have anything to add."""
        return self


class NoParams(Params, tag="none", frozen=True):
    """Nothing but the reason: stop, uncordon, swap in a standby, escalate, do nothing."""


class Removal(Params, tag="removal", frozen=True):
    """Evict or cordon: `slurm_job_id` names the Slurm job to requeue when the job name is not its id."""

    slurm_job_id: str = ""


class RestoreTier(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True, gc=False):
    """Where one rank restores its shard from (`actions.restore`)."""

    tier: str
    location: str
    node: str


class Restart(Params, tag="restart", frozen=True):
    """Restart training (from a checkpoint, a retry, a hot update or a rollback).

    `step`/`path` are the checkpoint to resume (None: from scratch),
    `restore_tiers` each rank's copy, `before_step` the bad step the
    checkpoint had to precede, `code_version` the version to run (required
    for a hot update or rollback). The runner adds the evicted nodes, the
    standby swaps and the job's new attempt number.
    """

    step: int | None = None
    path: str | None = None
    restore_tiers: dict[str, RestoreTier] = {}
    before_step: int | None = None
    code_version: str = ""
    exclude_nodes: list[str] = []
    standby: dict[str, str] = {}
    attempt: int | None = None

    def restarting(self, *, exclude_nodes: list[str], standby: dict[str, str], attempt: int) -> Self:
        return msgspec.structs.replace(self, exclude_nodes=exclude_nodes, standby=standby, attempt=attempt)


class DumpStacks(Params, tag="dump_stacks", frozen=True):
    """Sample every training process's stacks `repeat` times, `interval_s` apart."""

    repeat: int = 1
    interval_s: float = 10.0


class SelfCheck(Params, tag="self_check", frozen=True):
    """A stop-time self-check over `machines` (the runner fills them in); unset values come from settings."""

    checks: list[str] = []
    procs_per_machine: int | None = None
    timeout_s: float | None = None
    machines: list[str] = []

    def on_machines(self, machines: list[str]) -> Self:
        return msgspec.structs.replace(self, machines=machines)


class Replay(Params, tag="replay", frozen=True):
    """One phase (1 or 2) of a dual-phase SDC replay: `groups` of machines that rerun a step together."""

    phase: int = 0
    groups: list[list[str]] = []
    timeout_s: float | None = None
    machines: list[str] = []

    def on_machines(self, machines: list[str]) -> Self:
        return msgspec.structs.replace(self, machines=machines)


class Rendezvous(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True, gc=False):
    """Global rank 0's address for a fanned-out check."""

    host: str
    port: int


class MachineCheck(Params, tag="machine_check", frozen=True):
    """One machine's part of a fanned-out diagnosis (`actions.selfcheck.fanout`).

    Every machine gets the same check id, world, stages, rendezvous and
    wall-clock deadline, and its own `node_rank` in `machines`.
    """

    check_id: str
    machines: list[str]
    node_rank: int
    rendezvous: Rendezvous
    deadline: float
    checks: list[str] = []
    procs_per_machine: int = 1
    timeout_s: float = 10.0
    groups: list[list[str]] = []
    phase: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.node_rank < len(self.machines) or self.procs_per_machine < 1:
            raise ValueError(f"node_rank {self.node_rank} / procs_per_machine {self.procs_per_machine} "
                             f"out of range for {len(self.machines)} machines")


ActionParams = NoParams | Removal | Restart | DumpStacks | SelfCheck | Replay | MachineCheck
