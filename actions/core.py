"""What `trainguard act` does with each record, apart from how records arrive.

The Faust app (`streams.act.loop`) feeds records here; this class decides,
journals and executes. Three rules keep it durable and fast:

* State first, offsets after: a checkpoint or topology is journaled
  (`JobKnowledge`) and an incident's decision is journaled (`PlanRunner.admit`)
  inside `observe` / `decide`, i.e. before the agent returns and Faust may
  commit the record's offset. A restarted `act` rebuilds from the journal.
* Decide at once, execute aside: `decide` is a few dictionary lookups and one
  journal write; the plan (whose steps wait seconds to minutes for agents)
  runs on a thread pool, one plan at a time per job, so one job's slow
  eviction never delays another job's first command.
* Nothing is re-read: per-job knowledge is kept incrementally.

Operator commands from the console (`operator` topic) are applied by the
pure `actions.operator` under the runner's lock and audited under the
operator's name; the rails' state (breaker, standby pool, evicted nodes) is
published as a `rails_state` audit entry whenever it changes, for the
console to show, with each rule's and detector's precision from the
operators' verdicts (`actions.verdicts`: exported, and a rule in auto that
falls below the floor is audited `rule_precision_low`). Verdicts left by
`trainguard actions verdict` in the local journal are taken at each poll and
applied like the console's.

Nothing on these topics is trusted by being there (`trusts`, called by the
app for each record before it is handed over): an `ActionResult` counts
only when the node it names signed it (`security.node_public_keys`) and that
node is one its command addressed (act's journal knows each command's nodes), and
where Kafka ACLs cannot restrict who writes incidents, only incidents the
worker signed are acted on (`security.worker_public_keys`). Whatever fails
is audited (`result_rejected`, `incident_rejected`) and otherwise ignored.
An `OperatorCommand` counts only when the console signed it
(`security.console_public_keys`, whatever else is configured: with no console
key, none counts), it is unexpired and its id was never seen (ids are
journaled until they expire, so a restarted act refuses a replay too);
anything else is audited as `operator_rejected`. A node returns to the
standby pool only on a self-check verdict act holds itself (`selfchecks` in
the journal): a check act ran, or a result the node's own agent signed.

Checkpoint and topology records count only when signed by a key the job's
current attempt announced (`actions.attempt_keys`: each agent mints one per
start of its training process and announces it node-signed in an
`AttemptKey`); a record whose key may still be on its way is held and judged
again when the job's next key arrives. Refused ones are audited
(`checkpoint_rejected`, `topology_rejected`, `attempt_key_rejected`), held ones
too (`checkpoint_held`, `topology_held`). `security.job_records_trusted_by_acl`
switches this off for installs without agents (act warns).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from trainguard.actions.act_metrics import ActMetrics, NoMetrics
from trainguard.actions.attempt_keys import PREFIX as KEYS_PREFIX
from trainguard.actions.attempt_keys import AttemptKeys, Held
from trainguard.actions.engine import DecisionEngine
from trainguard.actions.ettr import EttrAccount
from trainguard.actions.knowledge import JobKnowledge
from trainguard.actions.lemons import STATE_KEY as LEMONS_KEY
from trainguard.actions.lemons import LemonPolicy
from trainguard.actions.lemons import quarantined as lemon_nodes
from trainguard.actions.operator import DEFAULT_MAX_AGE_S, apply_operator_command, record_selfcheck
from trainguard.actions.quarantine import Quarantine
from trainguard.actions.rollout import ROLLOUT_KINDS
from trainguard.actions.runner import PlanRunner
from trainguard.actions.verdicts import CLI_VERDICT_PREFIX, VerdictPolicy, low_rules, precision
from trainguard.schemas.actions import AGENT_TRANSLATION
from trainguard.schemas.bounded import Bounded, bounded_evictions
from trainguard.schemas.records import (
    ActionResult,
    AttemptKey,
    AuditEntry,
    CheckpointEvent,
    Decision,
    Incident,
    JobTopology,
    OperatorCommand,
    Record,
    TrainingStep,
)
from trainguard.schemas.signing import KeyRing, command_problem, signed_by_node

log = logging.getLogger(__name__)
OnDecision = Callable[[Incident, Decision], None]
Publish = Callable[[Record], None]


class ActCore:
    """Observe state, decide on incidents, run plans; thread-safe where the app needs it."""

    def __init__(self, *, engine: DecisionEngine, runner: PlanRunner, knowledge: JobKnowledge, publish: Publish,
                 metrics: ActMetrics | None = None, ettr: EttrAccount | None = None,
                 on_decision: OnDecision | None = None, plan_workers: int = 4, max_jobs: int = 4096,
                 operator_max_age_s: float = DEFAULT_MAX_AGE_S, node_keys: KeyRing | None = None,
                 worker_keys: KeyRing | None = None, durable: Callable[[], object] | None = None,
                 clock: Callable[[], float] = time.time, record_skew_s: float = 600.0,
                 console_keys: KeyRing | None = None, max_clock_skew_s: float = 30.0,
                 job_records_trusted: bool = False, lemons: LemonPolicy | None = None,
                 verdict_policy: VerdictPolicy | None = None) -> None:
        self.engine = engine
        self.runner = runner
        self.knowledge = knowledge
        self.publish = publish
        self.metrics: ActMetrics = metrics or NoMetrics()
        self.ettr = knowledge.ettr if ettr is None else ettr
        knowledge.ettr = self.ettr  # one account: observed here, journaled by the knowledge
        self.on_decision = on_decision or (lambda _i, _d: None)
        self.decided = 0
        self._pool = ThreadPoolExecutor(max_workers=plan_workers, thread_name_prefix="act-plan")
        self._lock = threading.Lock()  # ettr and the bookkeeping below, shared with plan threads
        self._job_locks: Bounded[str, threading.Lock] = Bounded(max_jobs)
        self._running: dict[str, Future[Decision]] = {}  # decision id -> its plan
        self.operator_max_age_s = operator_max_age_s
        self._rails_shown: dict[str, object] | None = None
        self.node_keys = node_keys or KeyRing()  # who may sign results (each node its own)
        self.worker_keys = worker_keys or KeyRing()  # empty: incidents trusted by Kafka ACLs alone
        self.durable = durable or (lambda: None)  # waits until the journal is mirrored (streams.act.state_mirror)
        self.clock = clock  # act's receive time: the only time the rails run on
        self.record_skew_s = record_skew_s
        self.console_keys = console_keys or KeyRing()  # empty: no operator command is ever applied
        self.max_clock_skew_s = max_clock_skew_s
        self.job_records_trusted = job_records_trusted  # True: checkpoints and topologies unsigned (ACLs alone)
        self.attempt_keys = AttemptKeys(max_jobs=max_jobs)
        self.quarantine = Quarantine(runner=runner, policy=lemons or LemonPolicy(), publish=publish,
                                     submit=self._pool.submit, gauge=self.metrics.lemons)
        self.quarantine.show()
        self.verdict_policy = verdict_policy or VerdictPolicy()
        self._low: list[str] = []  # rules in auto with a precision below the floor (audited as they become so)
        for job, state in runner.journal.states(KEYS_PREFIX).items():
            self.attempt_keys.restore(job, state)
        reported = runner.reported_attempt  # a restart goes beyond any attempt the job's agents announced
        runner.reported_attempt = lambda job: max(reported(job), self.attempt_keys.announced.get(job, 0))

    def save_state(self) -> None:
        """Journal what observing records changed and is not journaled as it happens (ETTR); the loop
        then waits for `durable` before committing the offsets of the records observed so far."""
        with self._lock:
            self.knowledge.save_ettr()

    # ------------------------------------------------------------ records

    def trusts(self, record: Record, value: bytes, headers: Sequence[tuple[str, bytes]] | None, *,
               topic: str = "", offset: int = -1) -> bool:
        """Whether `record` (exactly `value`, as received with `headers`) may be acted on; audit it if not."""
        if isinstance(record, (CheckpointEvent, JobTopology)) and not self.job_records_trusted:
            return self._job_record_trusted(Held(record, value, list(headers or []), topic, offset))
        problem = self._distrust(record, value, headers)
        if problem:
            self._reject(record, problem, topic, offset)
        return not problem

    def _distrust(self, record: Record, value: bytes, headers: Sequence[tuple[str, bytes]] | None) -> str:
        """Why a result or incident must be ignored ("" if trusted)."""
        if isinstance(record, ActionResult):
            return signed_by_node(self.node_keys, value, headers, record.node) or self._not_a_target(record)
        if isinstance(record, Incident) and self.worker_keys:
            return self.worker_keys.check(value, headers)[1]
        if isinstance(record, OperatorCommand):
            return self._operator_problem(record, value, headers)
        if isinstance(record, AttemptKey):  # the announcing node's own signature, then act's own memory
            if problem := signed_by_node(self.node_keys, value, headers, record.node):
                return problem
            self.attempt_keys.saw(record)
            members = self.runner.members(record.job) if record.attempt == 0 else None
            return self.attempt_keys.key_problem(record, commanded=self.runner.last_restart(record.job),
                                                 members=members)
        return ""

    def _job_record_trusted(self, held: Held) -> bool:
        """Whether a checkpoint or topology is signed by its job's current attempt; hold it while its key
        may be on its way, audit it when held or refused."""
        verdict = self.attempt_keys.verify(held.record, held.value, held.headers)
        kind = "checkpoint" if isinstance(held.record, CheckpointEvent) else "topology"
        if verdict.wait:
            self._audit_job_record(f"{kind}_held", held, verdict.problem)
            if (out := self.attempt_keys.hold(held)) is not None:
                name = "checkpoint" if isinstance(out.record, CheckpointEvent) else "topology"
                self._audit_job_record(f"{name}_rejected", out, "held too long: no key of the job's current "
                                       f"attempt vouched for it ({self.attempt_keys.max_held} records waiting)")
        elif verdict.problem:
            self._audit_job_record(f"{kind}_rejected", held, verdict.problem)
        return not verdict.problem

    def _audit_job_record(self, event: str, held: Held, reason: str) -> None:
        record = held.record
        detail: dict[str, object] = {"job": record.job, "reason": reason, "topic": held.topic,
                                     "offset": held.offset, "key_id": dict(held.headers).get("tg-kid", b"").decode(
                                         errors="replace")}
        if isinstance(record, CheckpointEvent):
            detail.update(step=record.step, path=record.path, status=record.status, node=record.node)
        else:
            detail.update(nodes=sorted(set(record.rank_nodes.values())), world_size=record.world_size)
        self.publish(AuditEntry(ts=time.time(), event=event, subject_id=record.job, actor="trainguard-act",
                                detail=detail))

    def _admit_key(self, key: AttemptKey) -> None:
        """Believe a trusted announcement (journaled), then judge again the records held for its job."""
        released = self.attempt_keys.admit(key)
        self.runner.journal.put_state(KEYS_PREFIX + key.job, self.attempt_keys.snapshot(key.job))
        self.publish(AuditEntry(ts=time.time(), event="attempt_key_accepted", subject_id=key.key_id,
                                actor="trainguard-act",
                                detail={"job": key.job, "attempt": key.attempt, "node": key.node,
                                        "trust": "first use" if key.attempt == 0 else "restart act sent"}))
        for held in released:
            if self._job_record_trusted(held):
                self.observe(held.record)

    def _not_a_target(self, result: ActionResult) -> str:
        """Why a node's signed result is not an answer to a command that addressed it ("" if it is).

        A node's good signature on another node's command must neither fail that node's step nor
        move the ETTR account or the audit trail; the bus and the merge drop it too.
        """
        targets = self.runner.addressed(result.command_id)
        if targets is not None and result.node in targets:
            sent = self.runner.sent_action(result.command_id)
            wire = {str(k): v for k, v in AGENT_TRANSLATION.items()}  # the verb the agent answers an action with
            if sent is None or result.action in (sent, wire.get(sent, sent)):
                return ""
            return f"answers another action: {result.action} from {result.node} for a {sent} command"
        return (f"not a target: result from {result.node or '?'} for command {result.command_id} "
                f"(addressed: {', '.join(sorted(targets or [])) or 'no command act sent'})")

    def _operator_problem(self, command: OperatorCommand, value: bytes,
                          headers: Sequence[tuple[str, bytes]] | None) -> str:
        """Why an operator command is not the console's ("" if it is); a trusted id is journaled as seen."""
        if not self.console_keys:
            return "no console key configured (security.console_public_keys): operator commands are refused"
        problem = self.console_keys.check(value, headers)[1]
        if problem:
            return problem
        journal = self.runner.journal
        with self.runner.lock:
            seen = journal.get_state("operator_seen")
            now = self.runner.clock()
            problem = command_problem(command, now=now, seen=seen, max_skew_s=self.max_clock_skew_s)
            if not problem:
                keep = {cid: exp for cid, exp in seen.items() if float(exp) + self.max_clock_skew_s >= now}
                journal.put_state("operator_seen", {**keep, command.id: command.expires})
        return problem

    def _reject(self, record: Record, problem: str, topic: str, offset: int) -> None:
        event = {ActionResult: "result_rejected", OperatorCommand: "operator_rejected",
                 AttemptKey: "attempt_key_rejected"}.get(type(record), "incident_rejected")
        subject = record.command_id if isinstance(record, ActionResult) else getattr(record, "id", "")
        subject = record.key_id if isinstance(record, AttemptKey) else subject
        detail = {"job": getattr(record, "job", ""), "node": getattr(record, "node", ""),
                  "reason": problem, "topic": topic, "offset": offset}
        if isinstance(record, OperatorCommand):  # what the unverified command claimed, for the audit trail
            detail.update(verb=record.verb, claimed_operator=record.operator, target=record.subject_id)
        self.publish(AuditEntry(ts=time.time(), event=event, subject_id=subject, actor="trainguard-act",
                                detail=detail))

    def observe(self, record: Record) -> None:
        """Apply one state record (checkpoint, topology, step, agent result); journaled before return."""
        if isinstance(record, CheckpointEvent):
            self.knowledge.observe_checkpoint(record)
        elif isinstance(record, JobTopology):
            self.knowledge.observe_topology(record)
        elif isinstance(record, TrainingStep):
            with self._lock:
                self.ettr.observe(record)
        elif isinstance(record, ActionResult):
            with self._lock:
                self.ettr.observe(record)
            if record.action == "self_check" and record.node:  # trusted: signed by that very node
                self._note_selfcheck([record.node], passed=record.status == "ok", source=record.command_id)
            self.publish(AuditEntry(ts=record.ts, event="action_result", subject_id=record.command_id,
                                    actor=record.node or "agent",
                                    detail={"job": record.job, "action": record.action, "status": record.status,
                                            "message": record.message}))
        elif isinstance(record, OperatorCommand):
            self.operate(record)
        elif isinstance(record, AttemptKey):
            self._admit_key(record)

    # ------------------------------------------------------------ operators

    def operate(self, command: OperatorCommand) -> None:
        """Apply a console operator's command to the journaled rails and decision; audit it."""
        runner = self.runner
        with runner.lock:
            runner._save_state()  # the journal's rails blob now mirrors the live rails exactly
            decision = runner.journal.get(command.subject_id) if command.verb in ("approve", "reject") else \
                runner.journal.decision_for(command.subject_id) if command.verb == "verdict" else None
            checks = runner.journal.get_state("selfchecks")
            out = apply_operator_command(command, rails=runner.journal.get_state("rails"), decision=decision,
                                         now=runner.clock(), max_age_s=self.operator_max_age_s, checks=checks,
                                         rollout=runner.rails.rollout, overrides=runner.journal.get_state("rollout"),
                                         lemons=runner.journal.get_state(LEMONS_KEY),
                                         verdicts=runner.journal.get_state("verdicts"))
            if out.rollout is not None:  # durable: the journal is mirrored on act-state
                runner.journal.put_state("rollout", out.rollout)
            if out.lemons is not None:
                runner.journal.put_state(LEMONS_KEY, out.lemons)
            if out.verdicts is not None:
                runner.journal.put_state("verdicts", out.verdicts)
            if out.applied:
                if command.verb in ("return_node", "release_node"):  # the pass is used up (a new one per eviction)
                    runner.journal.put_state("selfchecks", {n: v for n, v in checks.items()
                                                            if n != command.subject_id})
                runner.journal.put_state("rails", out.rails)
                runner._load_state()
                if out.decision is not None and out.decision is not decision:
                    runner.journal.update_decision(out.decision)
        self.publish(out.audit)
        if out.applied and command.verb == "release_node":
            self.quarantine.released(command.subject_id, command.operator)
        if out.applied and command.verb == "approve":
            self.resume()  # the approved plan runs now, not at the next timer tick

    def take_cli_verdicts(self) -> None:
        """Apply the verdicts `trainguard actions verdict` left in the local journal, as operator commands.

        Each request is its own journal key (no read-modify-write to race with the CLI) and is judged
        like the console's (a known incident, a known value), dated by act's clock when taken: who can
        write act's journal is trusted as for the CLI's approve and reset-breaker.
        """
        journal = self.runner.journal
        for key, req in journal.states(CLI_VERDICT_PREFIX).items():
            journal.put_states({CLI_VERDICT_PREFIX + key: None})
            self.operate(OperatorCommand(ts=self.runner.clock(), id=f"cli-{key}", verb="verdict",
                                         operator=str(req.get("operator", "")) or "cli",
                                         subject_id=str(req.get("incident", "")), reason=str(req.get("note", "")),
                                         verdict=str(req.get("verdict", ""))))

    def _note_selfcheck(self, nodes: list[str], *, passed: bool, source: str) -> None:
        """Journal the newest self-check verdict of `nodes` (what a node return is judged on)."""
        journal = self.runner.journal
        with self.runner.lock:
            journal.put_state("selfchecks", record_selfcheck(journal.get_state("selfchecks"), nodes, passed=passed,
                                                             source=source, now=self.runner.clock()))

    def _note_failed_checks(self, nodes: list[str], source: str) -> None:
        """Count a failed self-check against each node it blames (a lemon after `failed_selfchecks`)."""
        for node in nodes:
            self.quarantine.selfcheck(node, passed=False, source=source)

    def show_rails(self) -> None:
        """Publish the breaker, standby pool and evicted nodes when they changed (the console's view)."""
        runner = self.runner
        with runner.lock:
            rails = runner.rails
            shown: dict[str, object] = {
                "breaker": {"tripped": rails.breaker.tripped, "reason": rails.breaker.trip_reason},
                "pool": rails.pool.snapshot(), "approval_kinds": list(rails.approval_kinds),
                "rollout": rails.rollout.snapshot(),
                "evicted": {j: sorted(ns) for j, ns in runner.evicted.items()},
                "lemons": lemon_nodes(runner.journal.get_state(LEMONS_KEY)),
                "precision": (shown_precision := self._precision())}
        for entry in self._newly_low(shown_precision):
            self.publish(entry)
        if shown != self._rails_shown:
            self._rails_shown = shown
            self.metrics.rollout(rails.rollout.modes_by_kind(list(ROLLOUT_KINDS)), rails.rollout.rules)
            self.publish(AuditEntry(ts=time.time(), event="rails_state", subject_id="rails",
                                    actor="trainguard-act", detail=shown))

    def _precision(self) -> dict[str, Any]:
        """Per-rule and per-detector precision from the journaled verdicts (caller holds the runner's lock);
        exported, and a rule in auto that falls below the floor is audited once as it does."""
        runner, policy = self.runner, self.verdict_policy
        verdicts = runner.journal.get_state("verdicts")
        shown = precision(verdicts, now=runner.clock(), window_s=policy.window_s)
        kinds = {str(e.get("rule", "")): str(e.get("kind", "")) for e in verdicts.values() if isinstance(e, dict)}
        modes = {r: runner.rails.rollout.mode_for(k, r, runner.rails.approval_kinds) for r, k in kinds.items()}
        low = low_rules(shown["rules"], modes, policy)
        self.metrics.precision(shown, low)
        return {**shown, "modes": modes, "low": low, "floor": policy.floor, "min_verdicts": policy.min_verdicts,
                "window_s": policy.window_s}

    def _newly_low(self, shown: dict[str, Any]) -> list[AuditEntry]:
        """A `rule_precision_low` audit entry for each rule that fell below the floor since the last look."""
        low, policy = list(shown["low"]), self.verdict_policy
        out = [AuditEntry(ts=self.clock(), event="rule_precision_low", subject_id=rule, actor="trainguard-act",
                          detail={"rule": rule, "mode": "auto", **shown["rules"][rule], "floor": policy.floor,
                                  "min_verdicts": policy.min_verdicts, "window_s": policy.window_s})
               for rule in low if rule not in self._low]
        self._low = low
        return out

    def decide(self, incident: Incident) -> Decision | None:
        """Decide and journal (with the engine memory it changed); None for a redelivered incident.

        The plan is handed to the pool: the caller may commit the incident's offset
        as soon as this returns.
        """
        self._check_date(incident)
        with self._lock:
            self.ettr.observe(incident)
        decision = self.engine.decide(incident)
        admitted = self.runner.admit(decision, self.knowledge.engine_state())
        if admitted is None:
            return None
        self.publish(admitted)
        self.quarantine.incident(admitted, list(incident.nodes))  # journaled before the offset is committed
        self.decided += 1
        self.metrics.decided(kind=admitted.kind, rule=admitted.rule, status=admitted.status)
        if admitted.status == "planned" and not admitted.dry_run:
            self._submit(admitted, incident)
        else:
            self.on_decision(incident, admitted)
        return admitted

    def _check_date(self, incident: Incident) -> None:
        """Audit an incident dated far from act's clock: a wrong clock or a forger trying to move a window.

        It is still decided on (a real fault on a node with a bad clock must not be ignored);
        the breaker and cooldowns count it at act's time of receipt, whatever its date says.
        """
        skew = incident.ts - self.clock()
        if abs(skew) > self.record_skew_s:
            self.publish(AuditEntry(ts=self.clock(), event="record_clock_skew", subject_id=incident.id,
                                    actor="trainguard-act",
                                    detail={"job": incident.job, "kind": incident.kind, "record_ts": incident.ts,
                                            "skew_s": round(skew, 3), "bound_s": self.record_skew_s}))

    # ------------------------------------------------------------ plans

    def resume(self) -> None:
        """Run what the journal holds unfinished (after a restart, or an operator's approval)."""
        self.runner.poll_operator()
        self.take_cli_verdicts()
        for decision in self.runner.journal.unfinished():
            self._submit(decision, None)

    @property
    def busy(self) -> bool:
        """True while any plan is running."""
        with self._lock:
            return bool(self._running)

    def close(self, wait: bool = True) -> None:
        """Stop taking plans; by default let running ones finish (else they resume after a restart)."""
        self._pool.shutdown(wait=wait, cancel_futures=not wait)

    def _submit(self, decision: Decision, incident: Incident | None) -> None:
        with self._lock:
            if decision.id in self._running:
                return
            self._running[decision.id] = self._pool.submit(self._execute, decision, incident)

    def _execute(self, decision: Decision, incident: Incident | None) -> Decision:
        try:
            with self._job_lock(decision.job):  # one plan at a time per job, in decision order
                final = self.runner.run(decision)
            self._account(decision, final)
            if incident is not None:
                self.on_decision(incident, final)
            return final
        except Exception:
            log.exception("plan of decision %s failed; it resumes from the journal on restart", decision.id)
            raise
        finally:
            with self._lock:
                self._running.pop(decision.id, None)

    def _job_lock(self, job: str) -> threading.Lock:
        with self._lock:
            lock = self._job_locks.get(job)
            if lock is None:
                lock = self._job_locks[job] = threading.Lock()
            return lock

    def _account(self, decision: Decision, final: Decision) -> None:
        for result in self.runner.journal.steps(decision.id):
            self.metrics.acted(action=result.action, status=result.status)
            machines = result.details.get("machines")
            if result.action == "self_check" and isinstance(machines, list):  # a check act itself ran
                self._note_selfcheck([str(m) for m in machines], passed=result.status == "ok",
                                     source=result.command_id)
                if result.status == "failed":  # the machines it blames, only: a check names its culprits
                    blamed = result.details.get("culprits") or (machines if len(machines) == 1 else [])
                    self._note_failed_checks([str(m) for m in blamed], result.command_id)
        rails = self.runner.rails
        self.metrics.rails(breaker_tripped=rails.breaker.tripped, pool_size=rails.pool.size)
        with self._lock:
            report = self.ettr.report(final.job)
        self.metrics.ettr(job=final.job, ettr=report.ettr, unproductive_s=report.unproductive_s)
        self.metrics.evictions({"engine": bounded_evictions(self.engine) + self.engine.checkpoints.trimmed,
                                "runner": self.runner.evicted.evicted + self.runner.attempts.evicted,
                                "ettr": bounded_evictions(self.ettr)})
        if final.status != decision.status:
            self.publish(AuditEntry(ts=final.ts, event="incident_summary", subject_id=final.incident_id,
                                    actor="trainguard-act",
                                    detail={"job": final.job, "decision": final.id, "status": final.status,
                                            "rule": final.rule, "ettr": report.as_dict()}))
