"""Carry out a decision's plan, step by step, safely and exactly once.

Before a plan starts, every step it has left must have an enabled executor
(`Routes`): a plan that would evict and then find nobody to restart the job
fails before its first step. For each step the runner first looks in the
journal: a step with a result is never repeated (that is what makes a killed
consumer resume cleanly). Then it resolves the step's typed references to
earlier steps (`when`, `targets_from`: whether a check failed, whom it named),
passes evictions through the circuit breaker and the cooldown, gives the
command an unpredictable id, hands it to the executor that handles its action,
and journals the result before moving on. Every decision, command and result is audited.
Rail state (breaker, cooldown, standby pool) is journaled so it survives a
restart.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec

from trainguard.actions import sent_commands
from trainguard.actions.executors.base import Clock, Executor
from trainguard.actions.executors.registry import Routes
from trainguard.actions.journal import Journal
from trainguard.actions.lemons import STATE_KEY as LEMONS_KEY
from trainguard.actions.lemons import is_quarantined
from trainguard.actions.replay import ReplayPlan, locate
from trainguard.actions.rollout import RolloutPolicy, would_block
from trainguard.actions.safety import CircuitBreaker, Cooldown
from trainguard.actions.selfcheck.fanout import FanOut
from trainguard.actions.sent_commands import did_nothing
from trainguard.actions.settings import SelfCheckSettings
from trainguard.actions.standby import PoolExhausted, StandbyPool
from trainguard.actions.topology import Topology, job_members
from trainguard.schemas.action_params import ActionParams, Replay, Restart
from trainguard.schemas.actions import CLUSTER_ACTIONS, DIAGNOSES, REMOVES_NODE, RESTARTS_JOB, STOP_PLAN_ON_FAILURE
from trainguard.schemas.bounded import Bounded
from trainguard.schemas.plan import CulpritsOf, PlannedAction, ReplayCulprit
from trainguard.schemas.records import ActionCommand, ActionResult, AuditEntry, Decision, Record
from trainguard.schemas.signing import new_command_id

Emit = Callable[[Record], None]  # where the runner writes commands, results and audit entries
T = TypeVar("T")


def _locked(method: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(method)
    def wrapper(self: PlanRunner, *args: Any, **kwargs: Any) -> T:
        with self.lock:
            return method(self, *args, **kwargs)

    return wrapper


@dataclass
class Rails:
    """The safety rails and shared state the runner consults."""

    breaker: CircuitBreaker
    cooldown: Cooldown
    pool: StandbyPool
    approval_kinds: list[str] = field(default_factory=list)
    # The configured modes (operator changes are journaled and applied over them). A runner
    # built without settings acts; `trainguard act` builds it from actions.rollout (observe).
    rollout: RolloutPolicy = field(default_factory=RolloutPolicy.acting)
    shadow: CircuitBreaker | None = None  # counts observed evictions; None: one like `breaker`


class PlanRunner:
    """Executes decisions through executors, journaled and audited."""

    def __init__(self, *, journal: Journal, rails: Rails, executors: Routes | list[Executor],
                 sink: Emit, clock: Clock, topologies: dict[str, Topology] | None = None,
                 reported_attempt: Callable[[str], int] | None = None, max_jobs: int = 4096,
                 durable: Callable[[], object] | None = None, fanout: FanOut | None = None) -> None:
        self.journal = journal
        self.rails = rails
        # Plans of different jobs run on threads; rails, journal and bookkeeping change only in
        # `with self.lock` blocks, none of which spans an executor's wait for agents.
        self.lock = threading.RLock()
        self.routes = executors if isinstance(executors, Routes) else Routes(executors)
        self.sink = sink
        self.clock = clock
        self.topologies = topologies if topologies is not None else {}
        # Diagnoses go to every machine's agent at once, each running only its own check ranks.
        self.fanout = fanout or FanOut(SelfCheckSettings(), clock=clock)
        self.evicted: Bounded[str, set[str]] = Bounded(max_jobs)  # job ("" for idle nodes) -> nodes taken out
        # A restart generation shared by every node of the job: a standby swapped in must join the
        # same `attempt` as the nodes that stay, or detectors would see two jobs' worth of steps.
        self.reported_attempt = reported_attempt or (lambda job: 0)
        self.attempts: Bounded[str, int] = Bounded(max_jobs)
        # Per job, the last restart act sent: (its attempt, the nodes it went to). Only those nodes
        # may announce a key for that attempt (`actions.attempt_keys`).
        self.commanded: Bounded[str, tuple[int, list[str]]] = Bounded(max_jobs)
        # Per job, every (replaced node, spare) swap in order: the job's members are its topology
        # with these applied, whatever the pool did since (a returned node is no member again).
        self.replacements: Bounded[str, list[tuple[str, str]]] = Bounded(max_jobs)
        # Blocks until what the journal holds is also durable elsewhere (the act-state topic):
        # a command goes out only once its intent, and the decision behind it, would survive
        # the loss of this machine.
        self.durable = durable or (lambda: None)
        self.rollout_base = rails.rollout
        b = rails.breaker
        self.shadow = rails.shadow or CircuitBreaker(max_fraction=b.max_fraction, window_s=b.window_s,
                                                     fleet_size=b.fleet_size, min_job_size=b.min_job_size,
                                                     fleet_max_evictions=b.fleet_max_evictions)
        self._resets_seen = int(journal.get_state("operator").get("breaker_resets", 0))
        # What the runner carries out itself: exactly the table's runner-scope actions.
        self._own_steps: dict[str, Callable[[Decision, int, list[str]], ActionResult]] = {
            "escalate": self._escalate, "swap_standby": self._swap, "none": self._nothing}
        self._load_state()

    # ------------------------------------------------------------ decisions

    @_locked
    def admit(self, decision: Decision, state: dict[str, dict[str, Any]] | None = None) -> Decision | None:
        """Journal a new decision in its rollout mode, with `state` atomically; None if a duplicate.

        `observe`: status "observed", nothing will run, and `would_block` says whether the
        rails would have refused its evictions; `approve`: held for an operator; `auto`: planned.
        A dry run keeps its status (it runs nothing whatever the mode).
        """
        if self.journal.decision_for(decision.incident_id) is not None:
            self._audit("duplicate_incident", decision.incident_id, {"decision": decision.id})
            return None
        decision = self._in_mode(decision)
        if decision.status == "observed":  # its shadow reservation is journaled with it
            state = {**(state or {}), "rails": self._state()}
        if not self.journal.record_decision(decision, state):
            self._audit("duplicate_incident", decision.incident_id, {"decision": decision.id})
            return None
        self._audit("decision", decision.id, {"incident": decision.incident_id, "rule": decision.rule,
                                              "reason": decision.reason, "status": decision.status,
                                              "rollout": decision.rollout, "would_block": decision.would_block,
                                              "dry_run": decision.dry_run, "plan": [s.action for s in decision.plan]})
        return decision

    def _in_mode(self, decision: Decision) -> Decision:
        """`decision` with its rollout mode and the status that mode gives it (caller holds the lock)."""
        mode = self.rails.rollout.mode_for(decision.kind, decision.rule, self.rails.approval_kinds)
        decision = msgspec.structs.replace(decision, rollout=mode)
        if decision.dry_run or decision.status != "planned" or mode == "auto":
            return decision
        if mode == "approve":
            return msgspec.structs.replace(decision, status="awaiting_approval")
        blocked = would_block(decision, real=self.rails.breaker, shadow=self.shadow, cooldown=self.rails.cooldown,
                              job_size=self._job_size(decision.job), now=self.clock())
        return msgspec.structs.replace(decision, status="observed", would_block=blocked)

    def run(self, decision: Decision) -> Decision:
        """Execute (or resume) a planned decision; return it with its final status.

        One lock discipline: every read and change of the rails, the journal and the
        bookkeeping happens inside a `with self.lock` block of this method, and no block
        ever spans an executor's wait for agents, so plans of other jobs go on meanwhile.
        A step's breaker reservation is taken in the block that journals its intent and
        settled in the block that journals its result.
        """
        if decision.dry_run or decision.status != "planned":
            return decision
        with self.lock:
            if missing := self._unhandled(decision):
                return self._finish(decision, "failed", missing)
        results: dict[int, ActionResult] = {}
        status = "executed"
        for idx, step in enumerate(decision.plan):
            with self.lock:
                done = self.journal.step_result(decision.id, idx)
                todo = None if done is not None else self._prepare(decision, idx, step, results)
            if isinstance(todo, _Send):
                result = self._send(step, todo)  # no lock held: agents may take minutes
                with self.lock:
                    done = self._settle(decision, idx, step, todo.command, result)
            elif todo is not None:
                with self.lock:
                    done = self._journal_step(decision, idx, step, todo)
            assert done is not None
            results[idx] = done
            if done.status == "rejected" and step.action in REMOVES_NODE:
                status = "blocked"
                break
            if done.status in ("failed", "rejected") and step.action in STOP_PLAN_ON_FAILURE:
                status = "failed"
                break
        with self.lock:
            return self._finish(decision, status)

    def _journal_step(self, decision: Decision, idx: int, step: PlannedAction, done: ActionResult) -> ActionResult:
        """Journal a step's result with the rails it changed, in one transaction; audit it."""
        self.journal.record_step(decision.id, idx, done, state={"rails": self._state()})
        self._audit("result", done.command_id, {"decision": decision.id, "step": idx, "action": step.action,
                                                "status": done.status, "message": done.message,
                                                "details": done.details})
        return done

    def _unhandled(self, decision: Decision) -> list[str]:
        """The actions of the steps still to run that no enabled executor handles (journaled as failed)."""
        pending = [(i, s) for i, s in enumerate(decision.plan) if self.journal.step_result(decision.id, i) is None]
        missing = self.routes.unhandled(s.action for _, s in pending)
        enabled = ", ".join(self.routes.names) or "none"
        for idx, step in pending:
            if step.action in missing:
                why = f"no enabled executor handles {step.action} (enabled: {enabled}); the plan stops here"
                self.journal.record_step(decision.id, idx, self._result(decision, idx, step.action, "failed", why),
                                         state={"rails": self._state()})
        if missing:
            self._audit("unhandled", decision.id, {"incident": decision.incident_id, "actions": missing,
                                                   "executors": self.routes.names})
        return missing

    def _finish(self, decision: Decision, status: str, unhandled: list[str] | None = None) -> Decision:
        final = msgspec.structs.replace(decision, status=status)
        self.journal.update_decision(final)
        detail: dict[str, Any] = {"incident": decision.incident_id}
        if unhandled:
            detail["unhandled"] = unhandled
        self._audit("decision_" + status, decision.id, detail)
        return final

    @_locked
    def approve(self, decision_id: str) -> Decision | None:
        """Operator approval: move an awaiting decision to planned."""
        decision = self.journal.get(decision_id)
        if decision is None or decision.status != "awaiting_approval":
            return None
        decision = msgspec.structs.replace(decision, status="planned")
        self.journal.update_decision(decision)
        self._audit("approved", decision_id, {})
        return decision

    @_locked
    def poll_operator(self) -> None:
        """Apply operator requests another process left in the journal (breaker resets)."""
        requested = int(self.journal.get_state("operator").get("breaker_resets", 0))
        if requested > self._resets_seen:
            self._resets_seen = requested
            self.reset_breaker()
        for node in self.journal.take_node_returns():  # queued only after a passing self-check
            if is_quarantined(self.journal.get_state(LEMONS_KEY), node):  # a pass alone never returns a lemon
                self._audit("standby_return_refused", node, {"reason": "quarantined as a lemon: an operator's "
                                                             "release_node must come first"})
                continue
            if self.rails.pool.return_node(node, self_check_passed=True):
                for gone in self.evicted.values():
                    gone.discard(node)
                self._save_state()
                self._audit("standby_returned", node, {"pool_size": self.rails.pool.size})

    @_locked
    def reset_breaker(self) -> None:
        """Operator reset of a tripped circuit breaker."""
        self.rails.breaker.reset()
        self._save_state()
        self._audit("breaker_reset", "breaker", {})

    # ------------------------------------------------------------ one step

    def _prepare(self, decision: Decision, idx: int, step: PlannedAction,
                 results: dict[int, ActionResult]) -> ActionResult | _Send:
        """A step's result when it needs no command, else the command to send (caller holds the lock).

        A command journaled before a restart is sent again as it was: its rails were
        passed and its reservation is in the journaled rails state.
        """
        sent = self.journal.intent(decision.id, idx)
        if sent is not None:
            return _Send(sent, list(sent.nodes))
        if step.when is not None and (ended := results.get(step.when.step, _NONE).status) != step.when.status:
            return self._result(decision, idx, step.action, "skipped",
                                f"step {step.when.step} ended {ended}, not {step.when.status}; not needed")
        nodes = self._nodes_for(decision, step, results)
        if nodes is None:
            return self._result(decision, idx, step.action, "skipped", "the diagnosis named no machine")
        if (own := self._own_steps.get(step.action)) is not None:  # the table's runner-scope actions
            return own(decision, idx, nodes)
        params = step.params.on_machines(nodes)
        if step.action in RESTARTS_JOB:
            params = params.restarting(exclude_nodes=sorted(self.evicted.get(decision.job, set())),
                                       standby=dict(self.rails.pool.swaps), attempt=self._next_attempt(decision.job))
        targets = self._targets(decision.job, step.action, nodes)
        if not targets:
            # Fail safe: a command that names no node would reach every agent of the job
            # (an evicted node's too). Send nothing; the plan stops and a human is asked.
            why = f"no target node could be resolved for {step.action} (job {decision.job or '?'} topology unknown)"
            self._audit("escalation", decision.id, {"incident": decision.incident_id, "step": idx, "reason": why})
            return self._result(decision, idx, step.action, "failed", why + "; nothing sent, escalated")
        if isinstance(params, Restart) and params.attempt is not None:  # journaled with the intent below
            self.commanded[decision.job] = (params.attempt, list(targets))
        command_id, now = new_command_id(f"{decision.id}-{idx}"), self.clock()
        if step.action in REMOVES_NODE:
            if blocked := self._reserve(decision, idx, nodes, command_id, now):
                return self._result(decision, idx, step.action, "rejected", blocked)
        # Agent commands name exactly the agents that must act: an evicted node's agent must not restart.
        addressed = nodes if step.action in CLUSTER_ACTIONS else targets
        command = self._command(decision, idx, step.action, addressed, step.ranks, params, command_id, now)
        self.journal.record_intent(decision.id, idx, command, state={"rails": self._state()})
        return _Send(command, targets)

    def _reserve(self, decision: Decision, idx: int, nodes: list[str], command_id: str, now: float) -> str:
        """Pass the cooldown and count the nodes in the breaker in one step; why not ("" if reserved)."""
        verdict = self.rails.cooldown.check(nodes, ts=now)
        if verdict.allowed:
            verdict = self.rails.breaker.reserve(job=decision.job, nodes=nodes, job_size=self._job_size(decision.job),
                                                 now=now, tag=command_id)
        if not verdict.allowed:
            self._audit("blocked", decision.id, {"step": idx, "reason": verdict.reason, "nodes": nodes})
            return verdict.reason
        self.rails.cooldown.record(nodes, ts=now)
        self._audit("reserved", command_id, {"decision": decision.id, "step": idx, "nodes": nodes})
        return ""

    def _send(self, step: PlannedAction, todo: _Send) -> ActionResult:
        """Hand a journaled command to its executor and wait for its result (no lock held).

        Also the resume path after a crash between send and result: the same signed
        command goes out again, the agent or scheduler answers "already done", and that
        counts as done, so the node is recorded as evicted all the same.
        """
        command = todo.command
        executor = self.routes.for_action(step.action)
        if executor is None:  # checked before the plan started; only a config change mid-plan gets here
            return ActionResult(ts=self.clock(), command_id=command.id, action=command.action, status="rejected",
                                message=f"no enabled executor handles {step.action}", job=command.job)
        self.durable()  # the intent and its reservation would survive the loss of this machine
        if step.action in DIAGNOSES:
            return self.fanout.run(executor, command, todo.targets)
        return executor.execute(command, targets=todo.targets)

    def _settle(self, decision: Decision, idx: int, step: PlannedAction, command: ActionCommand,
                result: ActionResult) -> ActionResult:
        """Apply a sent command's effects and journal its result (caller holds the lock).

        The breaker's reservation is given back only for nodes that certainly did not act
        (refused before sending, or their agent's signed answer says it did nothing); a node
        that never answered stays counted, in cooldown, for the window, and the plan stops
        (evictions stop it on failure) with an escalation naming the silent nodes.
        """
        if isinstance(command.params, Restart) and command.params.attempt is not None:  # the generation it started
            self.attempts[decision.job] = max(self.attempts.get(decision.job, 0), command.params.attempt)
        if step.action in REMOVES_NODE:
            if quiet := did_nothing(command, result):
                self.rails.breaker.release(command.id, quiet)
                self.rails.cooldown.release(quiet, ts=command.ts)
                self._audit("reservation_released", command.id, {"decision": decision.id, "nodes": quiet})
            if result.status == "ok":
                self.evicted[decision.job] = self.evicted.get(decision.job, set()) | set(command.nodes)
            elif silent := [n for n in command.nodes if n not in quiet]:
                self._audit("escalation", decision.id, {
                    "incident": decision.incident_id, "step": idx, "nodes": silent,
                    "reason": f"{step.action} of {', '.join(silent)} ended {result.status} without a word that "
                              "they did nothing: they stay counted by the breaker and in cooldown for the window"})
        if command.nodes:  # who may answer it, kept once the intent is gone (see `addressed`)
            result = msgspec.structs.replace(result, details={**result.details, "addressed": list(command.nodes)})
        return self._journal_step(decision, idx, step, result)

    def addressed(self, command_id: str) -> frozenset[str] | None:
        """The nodes a command act sent was addressed to; None when act sent no such command."""
        return sent_commands.addressed(self.journal, command_id)

    def sent_action(self, command_id: str) -> str | None:
        """The action of the step a command id belongs to; None when act knows no such step."""
        return sent_commands.sent_action(self.journal, command_id)

    def _nodes_for(self, decision: Decision, step: PlannedAction, results: dict[int, ActionResult]) -> list[str] | None:
        ref = step.targets_from
        if isinstance(ref, ReplayCulprit):
            i, j = ref.phases
            plan = ReplayPlan(_groups(decision.plan[i]), _groups(decision.plan[j]))
            culprit = locate(plan, _failed_groups(results.get(i)), _failed_groups(results.get(j)))
            return [culprit] if culprit else (list(ref.fallback_nodes) or None)
        if isinstance(ref, CulpritsOf):
            named = results.get(ref.step, _NONE).details.get("culprits") or []
            return [str(n) for n in named] or None
        return list(step.nodes)

    def _escalate(self, decision: Decision, idx: int, nodes: list[str]) -> ActionResult:
        self._audit("escalation", decision.id, {"incident": decision.incident_id, "reason": decision.reason})
        return self._result(decision, idx, "escalate", "ok", "escalated to an operator")

    def _nothing(self, decision: Decision, idx: int, nodes: list[str]) -> ActionResult:
        return self._result(decision, idx, "none", "ok", "nothing to do")

    def _swap(self, decision: Decision, idx: int, nodes: list[str]) -> ActionResult:
        swaps: dict[str, str] = {}
        try:
            for node in nodes:
                swaps[node] = self.rails.pool.take(replacing=node)
        except PoolExhausted as exc:
            self._audit("standby_exhausted", decision.id, {"replaced": swaps, "pool_size": 0})
            return self._result(decision, idx, "swap_standby", "skipped", str(exc), {"swaps": swaps})
        self.replacements[decision.job] = [*self.replacements.get(decision.job, []), *swaps.items()]
        return self._result(decision, idx, "swap_standby", "ok", f"swapped in {', '.join(swaps.values())}",
                            {"swaps": swaps, "pool_size": self.rails.pool.size})

    def _targets(self, job: str, action: str, nodes: list[str]) -> list[str]:
        if action in CLUSTER_ACTIONS or nodes:
            return nodes
        topo = self.topologies.get(job)
        if topo is None:
            return []
        return job_members(topo.nodes, self.replacements.get(job, []), gone=self.evicted.get(job, set()),
                           ready_spares=set(self.rails.pool.spares))

    def last_restart(self, job: str) -> tuple[int, list[str]] | None:
        """(attempt, nodes) of the last restart act sent `job`; None if it never restarted it."""
        with self.lock:
            return self.commanded.get(job)

    def members(self, job: str) -> list[str] | None:
        """The job's nodes by its topology with every swap applied; None while no topology is known."""
        with self.lock:
            topo = self.topologies.get(job)
            return None if topo is None else job_members(topo.nodes, self.replacements.get(job, []),
                                                         gone=set(), ready_spares=set())

    def _next_attempt(self, job: str) -> int:
        nxt = max(self.attempts.get(job, 0), self.reported_attempt(job)) + 1
        self.attempts[job] = nxt
        return nxt

    def _job_size(self, job: str) -> int:
        """Nodes of the job; 0 (unknown) lets the breaker assume the smallest plausible job."""
        topo = self.topologies.get(job)
        return len(topo.nodes) if topo else 0

    def _command(self, decision: Decision, idx: int, action: str, nodes: list[str], ranks: list[int],
                 params: ActionParams, command_id: str, now: float) -> ActionCommand:
        command = ActionCommand(ts=now, id=command_id,
                                action=action,  # type: ignore[arg-type]
                                job=decision.job, nodes=nodes, ranks=ranks, params=params,
                                decision_id=decision.id, incident_id=decision.incident_id)
        self._audit("command", command.id, {"decision": decision.id, "step": idx, "action": action, "nodes": nodes})
        return command

    def _result(self, decision: Decision, idx: int, action: str, status: str, message: str,
                details: dict[str, Any] | None = None) -> ActionResult:
        return ActionResult(ts=self.clock(), command_id=f"{decision.id}-{idx}", action=action,  # type: ignore[arg-type]
                            status=status, message=message, job=decision.job, details=details or {})  # type: ignore[arg-type]

    def _audit(self, event: str, subject: str, detail: dict[str, Any]) -> None:
        self.sink(AuditEntry(ts=self.clock(), event=event, subject_id=subject, detail=detail, actor="trainguard-act"))

    def _load_state(self) -> None:
        state = self.journal.get_state("rails")
        self.rails.rollout = RolloutPolicy.restore(self.journal.get_state("rollout"), self.rollout_base)
        self.shadow.restore(state.get("shadow", {}))
        self.rails.breaker.restore(state.get("breaker", {}))
        self.rails.cooldown.restore(state.get("cooldown", {}))
        if "pool" in state:
            self.rails.pool.restore(state["pool"])
        for job, nodes in state.get("evicted", {}).items():
            self.evicted[job] = set(nodes)
        for job, attempt in state.get("attempts", {}).items():
            self.attempts[job] = int(attempt)
        for job, (attempt, nodes) in state.get("commanded", {}).items():
            self.commanded[job] = (int(attempt), [str(n) for n in nodes])
        for job, swaps in state.get("replacements", {}).items():
            self.replacements[job] = [(str(old), str(new)) for old, new in swaps]

    def _save_state(self) -> None:
        self.journal.put_state("rails", self._state())

    def _state(self) -> dict[str, Any]:
        return {"breaker": self.rails.breaker.snapshot(), "shadow": self.shadow.snapshot(),
                "pool": self.rails.pool.snapshot(),
                "cooldown": self.rails.cooldown.snapshot(),
                "evicted": {j: sorted(ns) for j, ns in self.evicted.items()}, "attempts": dict(self.attempts),
                "commanded": {j: [a, ns] for j, (a, ns) in self.commanded.items()},
                "replacements": {j: [list(p) for p in ps] for j, ps in self.replacements.items()}}


_NONE = ActionResult(ts=0.0, command_id="", action="none", status="skipped")


@dataclass(frozen=True)
class _Send:
    """A journaled command about to go out, and the nodes expected to answer it."""

    command: ActionCommand
    targets: list[str]


def _groups(step: PlannedAction) -> list[list[str]]:
    """A replay phase's groupings (`check_plan` made sure the step is a replay)."""
    return step.params.groups if isinstance(step.params, Replay) else []


def _failed_groups(result: ActionResult | None) -> list[int]:
    if result is None:
        return []
    return [int(g) for g in result.details.get("failed_groups", [])]
