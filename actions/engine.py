"""The decision engine: one incident in, one explained plan out.

Pure: it reads the incident and what it knows of the job (checkpoints,
topology, earlier incidents) and returns a `Decision` recording the rule,
the inputs and the alternatives it considered. Time comes from the incident.
Executing the plan is `actions.runner`'s job. The policy follows ByteRobust:
isolate fast rather than diagnose exactly, treat code errors as first-class
(roll back, do not evict), and keep recovery predictable (restart from a
known checkpoint, on a known set of nodes).

Plan steps refer to earlier steps through typed fields (schemas/plan.py):
`when` (run only if step i failed) and `targets_from` (evict whom step i
named, or the machine the two replay phases name).
"""

from __future__ import annotations

from typing import Any

import msgspec

from trainguard.actions.checkpoints import Checkpoint, CheckpointRegistry
from trainguard.actions.replay import plan_regroupings
from trainguard.actions.topology import Topology
from trainguard.schemas.action_params import NoParams, Removal, Replay, Restart, SelfCheck
from trainguard.schemas.bounded import Bounded
from trainguard.schemas.ids import anomaly_id
from trainguard.schemas.kinds import SICK_NODE_KINDS
from trainguard.schemas.names import bad_name
from trainguard.schemas.plan import CulpritsOf, PlannedAction, ReplayCulprit, StepCondition, StepRef
from trainguard.schemas.records import Decision, Incident, JobTopology

SELF_CHECKS = ["dcgm", "all_to_all", "all_gather", "bitwise"]


class DecisionEngine:
    """Maps incidents to plans following ByteRobust's recovery principles."""

    def __init__(
        self,
        checkpoints: CheckpointRegistry,
        *,
        dry_run: bool = False,
        retry_window_s: float = 3600.0,
        network_confirmations: int = 2,
        max_jobs: int = 4096,
        max_nodes: int = 65536,
    ) -> None:
        self.checkpoints = checkpoints
        self.dry_run = dry_run
        self.retry_window_s = retry_window_s
        self.network_confirmations = network_confirmations
        # Every per-key memory is bounded (an endless stream of jobs must not grow it) and
        # journaled through `snapshot`, so a restarted consumer decides as the old one would.
        self.topologies: Bounded[str, Topology] = Bounded(max_jobs)
        self._nan_steps: Bounded[str, list[int]] = Bounded(max_jobs)
        self._retried: Bounded[str, float] = Bounded(max_jobs)
        self._network_seen: Bounded[str, float] = Bounded(max_nodes)  # "job\x00node" -> last seen

    def snapshot(self) -> dict[str, Any]:
        """The engine's memory of earlier incidents, as plain data for the journal."""
        return {"nan_steps": dict(self._nan_steps), "retried": dict(self._retried),
                "network_seen": dict(self._network_seen)}

    def restore(self, state: dict[str, Any]) -> None:
        """Inverse of `snapshot`."""
        for key, steps in state.get("nan_steps", {}).items():
            self._nan_steps[key] = [int(s) for s in steps]
        for key, ts in state.get("retried", {}).items():
            self._retried[key] = float(ts)
        for key, ts in state.get("network_seen", {}).items():
            self._network_seen[key] = float(ts)

    def observe_topology(self, record: JobTopology) -> None:
        """Learn (or update) a job's parallel layout."""
        self.topologies[record.job] = Topology.from_record(record)

    def decide(self, incident: Incident) -> Decision:
        """Choose the plan for one incident."""
        kind = incident.kind
        if not incident.job and kind in SICK_NODE_KINDS and incident.nodes:
            return self._jobless_node(incident)
        if kind == "hw_fault":
            return self._hw_fault(incident)
        if kind == "network":
            return self._network(incident)
        if kind in ("hang", "slowdown"):
            return self._hang_or_slowdown(incident)
        if kind in ("nan", "loss_spike"):
            return self._numeric(incident)
        if kind == "sdc":
            return self._sdc(incident, rule="sdc.dual_phase_replay")
        if kind == "user_error":
            return self._user_error(incident)
        return self._retry_then_escalate(incident)

    # ------------------------------------------------------------ the rules

    def _hw_fault(self, inc: Incident) -> Decision:
        nodes = self._suspect_nodes(inc)
        if not nodes:
            return self._escalate(inc, "hw_fault.unlocalised", "hardware fault names no node; an operator must look")
        return self._decision(
            inc, rule="hw_fault.evict_swap_restart", plan=self._evict_and_restart(inc, nodes),
            reason=f"hardware fault on {', '.join(nodes)}: evict, swap in a standby, "
                   "restart from the latest checkpoint",
            alternatives=["diagnose in place: rejected, isolating first is faster and a sick GPU fails again",
                          "retry on the same nodes: rejected, hardware faults recur"],
        )

    def _jobless_node(self, inc: Incident) -> Decision:
        """A sick node that runs no known job: cordon it for repair; no job needs restarting.

        The eviction still passes the breaker (as a fleet eviction), so a flapping
        switch that makes idle nodes look sick cannot drain the fleet either.
        """
        nodes = list(dict.fromkeys(inc.nodes))
        return self._decision(
            inc, rule=f"{inc.kind}.cordon_idle_node",
            plan=[PlannedAction(action="cordon_node", nodes=nodes, params=Removal(reason=inc.kind))],
            reason=f"{inc.kind} on {', '.join(nodes)}, which runs no known job: cordon for repair",
            alternatives=["ignore: rejected, the next job scheduled there would fail"])

    def _network(self, inc: Incident) -> Decision:
        nodes = self._suspect_nodes(inc)
        if not nodes:
            return self._escalate(inc, "network.unlocalised", "network fault names no node; likely a switch")
        seen = sum(1 for n in nodes if inc.detected_at - self._network_seen.get(f"{inc.job}\x00{n}", -1e18)
                   <= self.retry_window_s)
        confirmations = max(len(inc.anomaly_ids), int(inc.evidence.get("confirmations", 0))) + seen
        for node in nodes:
            self._network_seen[f"{inc.job}\x00{node}"] = inc.detected_at
        alternatives = ["evict at once: rejected, one flap is often a transient link error",
                        "ignore: rejected, a bad NIC slows every collective of the job"]
        if confirmations >= self.network_confirmations or inc.evidence.get("confirmed"):
            return self._decision(
                inc, rule="network.confirmed_evict", plan=self._evict_and_restart(inc, nodes),
                reason=f"network fault on {', '.join(nodes)} confirmed {confirmations} time(s): evict and restart",
                inputs={"confirmations": confirmations}, alternatives=alternatives)
        plan = [PlannedAction(action="self_check", nodes=nodes, params=SelfCheck(checks=["all_gather"])),
                *self._evict_and_restart(inc, nodes, when=StepCondition(step=0))]
        return self._decision(
            inc, rule="network.confirm_then_evict", plan=plan,
            reason=f"network fault on {', '.join(nodes)} seen once: confirm with an all-gather self-check, "
                   "evict only if it fails",
            inputs={"confirmations": confirmations}, alternatives=alternatives)

    def _hang_or_slowdown(self, inc: Incident) -> Decision:
        kind, nodes = inc.kind, self._suspect_nodes(inc)
        first = [PlannedAction(action="dump_stacks")] if kind == "hang" else []
        topo = self._topology(inc)
        if len(nodes) == 1:
            return self._decision(
                inc, rule=f"{kind}.evict_outlier", plan=first + self._evict_and_restart(inc, nodes),
                reason=f"{kind}: localisation names {nodes[0]}; evict it and restart",
                alternatives=["stop-time self-check: rejected, the localisation is already certain"])
        if nodes:
            group = topo.smallest_group(nodes=set(inc.nodes), ranks=set(inc.ranks)) if topo else None
            evict = sorted(group.nodes) if group else nodes
            what = f"the smallest {group.kind} group" if group else "every suspect (no topology known)"
            return self._decision(
                inc, rule=f"{kind}.over_evict_group", plan=first + self._evict_and_restart(inc, evict),
                reason=f"{kind}: no single node certain among {', '.join(nodes)}; over-evict {what}: "
                       f"{', '.join(evict)}",
                inputs={"suspects": nodes, "group": group.kind if group else "suspects"},
                alternatives=["evict one suspect: rejected, a wrong guess costs another failed restart",
                              "evict the whole job: rejected, a smaller group contains every suspect"])
        if topo is None:
            return self._escalate(inc, f"{kind}.no_localisation",
                                  f"{kind} with no suspects and no known topology; an operator must look")
        machines = topo.nodes
        step = len(first)
        plan = first + [PlannedAction(action="self_check", nodes=machines, params=SelfCheck(checks=SELF_CHECKS))]
        plan += self._evict_and_restart(inc, [], targets_from=CulpritsOf(step=step))
        return self._decision(
            inc, rule=f"{kind}.stop_time_diagnosis", plan=plan,
            reason=f"{kind} with no clear outlier: stop and run the hierarchical self-check on "
                   f"{len(machines)} machines, evict the one it names",
            alternatives=["evict the whole job: rejected, a self-check costs minutes, not the fleet"])

    def _numeric(self, inc: Incident) -> Decision:
        seen = self._nan_steps.get(inc.job, [])
        if inc.step is not None and inc.step in seen:
            return self._sdc(inc, rule=f"{inc.kind}.recurrence_as_sdc")
        if inc.step is not None:
            self._nan_steps[inc.job] = [*seen, inc.step][-64:]  # a recurrence is near; older steps do not matter
        ckpt = self.checkpoints.latest_before(inc.job, step=inc.step, ts=inc.onset)
        alternatives = ["evict: rejected, a first NaN is usually numeric, not hardware",
                        "skip the batch: rejected, optimizer state may already be poisoned"]
        if ckpt is None:
            return self._decision(
                inc, rule=f"{inc.kind}.restore_checkpoint",
                plan=[PlannedAction(action="restart_from_checkpoint", params=Restart())],
                reason=f"{inc.kind} at step {inc.step}: no checkpoint before it is known; restart from scratch",
                alternatives=alternatives)
        return self._decision(
            inc, rule=f"{inc.kind}.restore_checkpoint",
            plan=[PlannedAction(action="restart_from_checkpoint", params=_ckpt_params(ckpt, before=inc.step))],
            reason=f"restore the latest checkpoint before step {inc.step}: step {ckpt.step} ({ckpt.path})",
            inputs={"bad_step": inc.step, "checkpoint_step": ckpt.step, "checkpoint_path": ckpt.path},
            alternatives=alternatives)

    def _sdc(self, inc: Incident, *, rule: str) -> Decision:
        topo = self._topology(inc)
        machines = topo.dp_machines() if topo else self._suspect_nodes(inc)
        ckpt = self.checkpoints.latest_before(inc.job, step=inc.step, ts=inc.onset)
        restart = PlannedAction(action="restart_from_checkpoint", params=_ckpt_params(ckpt, before=inc.step))
        if len(machines) < 2:
            if not machines:
                return self._escalate(inc, rule, "silent data corruption with no known machines")
            return self._decision(
                inc, rule=rule, plan=self._evict_and_restart(inc, machines, ckpt=ckpt),
                reason=f"silent data corruption on the only known machine {machines[0]}: evict and restore")
        replay = plan_regroupings(machines)
        # If the replay cannot reproduce the corruption (a transient flip), an unambiguous checksum
        # vote of the replicas (>= 3 agreeing against one) still names the machine.
        voted = list(inc.nodes) if inc.nodes and not inc.evidence.get("ambiguous", True) else []
        located = ReplayCulprit(phases=(1, 2), fallback_nodes=tuple(voted))
        # Stop first: every step trained on corrupt weights is wasted, and the replay takes minutes.
        stop = NoParams(reason=f"{inc.kind}: stop before diagnosis")
        plan = [PlannedAction(action="stop", nodes=machines, params=stop),
                PlannedAction(action="replay_regroup", nodes=machines, params=Replay(phase=1, groups=replay.phase1)),
                PlannedAction(action="replay_regroup", nodes=machines, params=Replay(phase=2, groups=replay.phase2)),
                PlannedAction(action="evict_node", targets_from=located),
                PlannedAction(action="swap_standby", targets_from=located),
                restart]
        return self._decision(
            inc, rule=rule, plan=plan,
            reason=f"{inc.kind} at step {inc.step}: localise by dual-phase replay over {len(machines)} machines "
                   f"({len(replay.phase1)} then {len(replay.phase2)} groups), evict the machine both name, restore",
            inputs={"machines": machines, "phase1": replay.phase1, "phase2": replay.phase2},
            alternatives=["restore only: rejected, corruption recurs on the same machine",
                          "evict every machine of the failing replica group: rejected, replay names one"])

    def _user_error(self, inc: Incident) -> Decision:
        if inc.evidence.get("cause") == "unknown":  # ranks died and nothing said why: no code to blame yet
            return self._retry_then_escalate(inc, name="job_crash")
        bad = str(inc.evidence.get("code_version", ""))
        good = str(inc.evidence.get("last_good_code_version", ""))
        ckpt = self.checkpoints.latest_with_code(inc.job, exclude=bad) if not good else None
        good = good or (ckpt.code_version if ckpt else "")
        if not good:
            return self._escalate(inc, "user_error.no_good_version",
                                  "user/code error and no earlier code version known")
        latest = self.checkpoints.latest_before(inc.job, step=inc.step, ts=inc.onset)
        params = msgspec.structs.replace(_ckpt_params(latest, before=inc.step), code_version=good)
        return self._decision(
            inc, rule="user_error.rollback_code", plan=[PlannedAction(action="rollback_code", params=params)],
            reason=f"code error under version {bad or '?'}: hot-update back to {good} and resume; no node is at fault",
            inputs={"bad_code_version": bad, "good_code_version": good},
            alternatives=["evict: rejected, the hardware is fine and the bug would follow the job",
                          "retry: rejected, the same code fails the same way"])

    def _retry_then_escalate(self, inc: Incident, name: str = "") -> Decision:
        """Retry once from the latest checkpoint; the same fault again within the window escalates.

        `name` replaces the kind in the rule's name (a crash pending diagnosis is `job_crash.retry_once`).
        """
        name = name or inc.kind
        last = self._retried.get(inc.job)
        if last is not None and inc.detected_at - last <= self.retry_window_s:
            return self._escalate(inc, f"{name}.escalate_after_retry",
                                  f"{name} fault again {inc.detected_at - last:.0f}s after a retry; escalating")
        self._retried[inc.job] = inc.detected_at
        ckpt = self.checkpoints.latest(inc.job)
        return self._decision(
            inc, rule=f"{name}.retry_once",
            plan=[PlannedAction(action="retry", nodes=inc.nodes, params=_ckpt_params(ckpt))],
            reason=f"{name} fault with no known cause: retry once from the latest checkpoint",
            alternatives=["evict: rejected, nothing points at a node", "escalate now: rejected, most are transient"])

    # ------------------------------------------------------------ helpers

    def _suspect_nodes(self, inc: Incident) -> list[str]:
        nodes = list(dict.fromkeys(inc.nodes))
        topo = self._topology(inc)
        if topo is not None and inc.ranks:
            nodes += sorted(topo.nodes_of(set(inc.ranks)) - set(nodes))
        return nodes

    def _topology(self, inc: Incident) -> Topology | None:
        """The job's announced topology, else one carried in `evidence["topology"]`."""
        known = self.topologies.get(inc.job)
        carried = inc.evidence.get("topology")
        if known is not None or not isinstance(carried, dict):
            return known
        try:
            record = msgspec.convert({**carried, "ts": inc.ts, "job": inc.job}, JobTopology, strict=False)
        except msgspec.ValidationError:
            return None  # malformed evidence: decide as if no topology were known
        if bad_name(record) is not None:
            return None  # a node name with a control or bidirectional character: as malformed
        return Topology.from_record(record)

    def _evict_and_restart(self, inc: Incident, nodes: list[str], *, when: StepCondition | None = None,
                           targets_from: StepRef | None = None, ckpt: Checkpoint | None = None) -> list[PlannedAction]:
        ckpt = ckpt or self.checkpoints.latest(inc.job, lost_nodes=set(nodes))
        # The restart does not take its targets from the diagnosis: a stopped or hung job must train
        # again even when the self-check named no machine (then nothing is evicted and all nodes restart).
        return [PlannedAction(action="evict_node", nodes=nodes, params=Removal(reason=inc.kind), when=when,
                              targets_from=targets_from),
                PlannedAction(action="swap_standby", nodes=nodes, when=when, targets_from=targets_from),
                PlannedAction(action="restart_from_checkpoint", params=_ckpt_params(ckpt), when=when)]

    def _escalate(self, inc: Incident, rule: str, reason: str) -> Decision:
        return self._decision(inc, rule=rule, reason=reason,
                              plan=[PlannedAction(action="escalate", nodes=inc.nodes, ranks=inc.ranks)])

    def _decision(self, inc: Incident, *, rule: str, plan: list[PlannedAction], reason: str,
                  inputs: dict[str, Any] | None = None, alternatives: list[str] | None = None) -> Decision:
        return Decision(
            ts=inc.detected_at,
            id=anomaly_id("decision", inc.id),
            incident_id=inc.id,
            job=inc.job,
            kind=inc.kind,
            rule=rule,
            plan=plan,
            reason=reason,
            inputs={"incident": inc.id, "step": inc.step, "nodes": inc.nodes, "ranks": inc.ranks,
                    "topology_known": self._topology(inc) is not None,
                    "detector": str(inc.evidence.get("detector", "")),  # per-detector precision (verdicts)
                    **(inputs or {})},
            alternatives=alternatives or [],
            dry_run=self.dry_run,
        )


def _ckpt_params(ckpt: Checkpoint | None, *, before: int | None = None) -> Restart:
    """A restart from `ckpt` (from scratch when None); `restore_tiers`: which tier each rank restores from."""
    if ckpt is None:
        return Restart(before_step=before)
    return Restart(step=ckpt.step, path=ckpt.path, restore_tiers=ckpt.tiers or {}, before_step=before)
