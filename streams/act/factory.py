"""Build a whole `act` from settings: journal, state mirror, engine, rails, executors, app.

`create_action_app(settings, ...)` is what `trainguard act`, the benchmarks
and the integration tests call; the CLI only adds printing and the Lease.
Order matters and is kept here in one place: the state topic is read and
reconciled into the journal (`streams.act.state_mirror`) *before* anything is
loaded from the journal, so a fresh machine starts from what the old `act`
knew, and the mirror's `wait_durable` is handed to the consume loop (before
offsets are committed) and to the runner (before a command is sent).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import faust

from trainguard.actions.checkpoints import CheckpointRegistry
from trainguard.actions.core import ActCore, OnDecision
from trainguard.actions.engine import DecisionEngine
from trainguard.actions.ettr import EttrAccount
from trainguard.actions.executors import registry
from trainguard.actions.journal import Journal
from trainguard.actions.knowledge import JobKnowledge
from trainguard.actions.runner import PlanRunner, Rails
from trainguard.actions.safety import CircuitBreaker, Cooldown
from trainguard.actions.selfcheck.fanout import FanOut
from trainguard.actions.settings import ActionSettings
from trainguard.actions.standby import StandbyPool
from trainguard.schemas.actions import ACTIONS
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import ActionCommand, ActionResult, AuditEntry, Record
from trainguard.schemas.topics import Topics, key_for
from trainguard.streams import kafka_io
from trainguard.streams.act.command_bus import KafkaCommandBus
from trainguard.streams.act.loop import create_act_app
from trainguard.streams.act.metrics import ActionMetrics
from trainguard.streams.act.state_mirror import StateMirror
from trainguard.streams.settings import ActConfig

log = logging.getLogger(__name__)
ACL_TRUST_WARNING = ("incidents are NOT verified (security.incidents_trusted_by_acl, or a dry run): any record on "
                     "the incidents topic is acted on; only Kafka ACLs stop a forger. Set "
                     "security.worker_public_keys to act only on incidents the worker signed")

RECORD_TRUST_WARNING = ("checkpoint and topology records are NOT verified (security.job_records_trusted_by_acl, or a "
                        "dry run without node keys): anyone who may write the checkpoints or training topics can "
                        "choose any job's restore point, restart targets and size. Run jobs under `trainguard run` "
                        "(their records are signed per attempt) and leave the setting false")


@dataclass
class ActionApp:
    """A built `act`: the Faust app, its core, its metrics, the state mirror (None: journal only) and `close`."""

    app: faust.App
    core: ActCore
    metrics: ActionMetrics
    mirror: StateMirror | None
    close: Callable[[], None]


def create_action_app(settings: ActConfig, *, executors: list[str] | None = None, dry_run: bool | None = None,
                      on_decision: OnDecision | None = None, max_incidents: int | None = None,
                      timeout_s: float | None = None, on_fenced: Callable[[], None] | None = None) -> ActionApp:
    """Wire a complete `act` from settings (call once leading: the mirror fences any predecessor).

    A dry run journals decisions locally only: it never takes over the state topic.
    `on_fenced` runs when a newer act took the state topic over (default: exit at once).
    """
    cfg = settings.actions
    dry = cfg.dry_run if dry_run is None else dry_run
    metrics = ActionMetrics()
    core, mirror, close = build_core(settings, executors=executors or cfg.enabled_executors(), dry_run=dry,
                                     on_decision=on_decision, on_fenced=on_fenced or _exit_fenced, metrics=metrics)
    app = create_act_app(settings, core, max_incidents=max_incidents, timeout_s=timeout_s)
    return ActionApp(app=app, core=core, metrics=metrics, mirror=mirror, close=close)


def build_core(settings: ActConfig, *, executors: list[str], dry_run: bool, on_decision: OnDecision | None = None,
               on_fenced: Callable[[], None] = lambda: None, metrics: ActionMetrics | None = None,
               ) -> tuple[ActCore, StateMirror | None, Callable[[], None]]:
    """The `ActCore` behind the app, its state mirror, and a function that waits for running plans
    and releases the journal and the Kafka clients."""
    cfg, sec = settings.actions, settings.security
    topics = Topics(settings.topics.prefix)
    # No default key: act refuses to execute anything it could not sign (one line, exit 2, via the CLI).
    signer = None if dry_run else sec.signer("act")
    node_keys = sec.ring("node") if dry_run else sec.required_ring("node")
    worker_keys = sec.ring("worker") if dry_run else sec.incident_ring()  # a dry run acts on nothing
    journal = Journal(cfg.state_dir / "journal.sqlite")
    mirror: StateMirror | None = None
    if cfg.state_topic and not dry_run:
        mirror = StateMirror(broker=settings.broker, topic=topics.name("act-state"), journal=journal,
                             transactional_id=f"{cfg.group_id}.state", writer=f"act@{os.uname().nodename}",
                             on_fenced=on_fenced)
        mirror.start()  # the journal now holds everything the topic knew, newest version winning
    durable = mirror.wait_durable if mirror is not None else None
    checkpoints = CheckpointRegistry(max_jobs=cfg.max_jobs)
    engine = DecisionEngine(checkpoints, dry_run=dry_run, retry_window_s=cfg.retry_window_s,
                            network_confirmations=cfg.network_confirmations, max_jobs=cfg.max_jobs)
    ettr = EttrAccount(max_jobs=cfg.max_jobs)
    knowledge = JobKnowledge(journal, engine, checkpoints, ettr)
    knowledge.load()  # every checkpoint, topology, ETTR account and earlier incident the old act knew
    # Reconnect fast after a broker outage (kafka-python backs off up to 30 s by default): the first
    # command after the broker returns must not wait for a backoff timer.
    producer = kafka_io.producer(settings.broker, reconnect_backoff_max_ms=500)
    codec = Codec()

    def publish(record: Record) -> None:
        """Send one record to its topic (audit entries key by job or subject). Thread-safe."""
        rkey = key_for(record) if not isinstance(record, AuditEntry) else str(record.detail.get("job", "")).encode()
        producer.send(topics.for_record(record), key=rkey or None, value=codec.encode(record))

    bus: KafkaCommandBus | None = None
    routes = registry.Routes([_Refuse()])  # dry run: decisions are journaled, nothing is ever sent
    if signer is not None:
        bus = KafkaCommandBus(broker=settings.broker, topics=topics, signer=signer, node_keys=node_keys,
                              ttl_s=sec.command_ttl_s, on_reject=partial(_audit_rejected, publish))
        routes = registry.build(executors, registry.ExecutorContext(cfg, time.time, bus))
    runner = PlanRunner(journal=journal, rails=_rails(cfg), executors=routes, sink=publish, clock=time.time,
                        topologies=engine.topologies, reported_attempt=ettr.attempt, max_jobs=cfg.max_jobs,
                        durable=durable, fanout=FanOut(cfg.selfcheck, clock=time.time))
    core = ActCore(engine=engine, runner=runner, knowledge=knowledge, publish=publish, ettr=ettr, metrics=metrics,
                   on_decision=on_decision, plan_workers=cfg.plan_workers, max_jobs=cfg.max_jobs,
                   operator_max_age_s=cfg.operator_max_age_s, node_keys=node_keys, worker_keys=worker_keys,
                   durable=durable, console_keys=sec.ring("console"), max_clock_skew_s=sec.max_clock_skew_s,
                   record_skew_s=cfg.record_skew_s, verdict_policy=cfg.rollout.verdict_policy(),
                   job_records_trusted=sec.job_records_trusted_by_acl or (dry_run and not node_keys),
                   lemons=cfg.lemons.policy())
    if not worker_keys:
        log.warning("act: %s", ACL_TRUST_WARNING)
        if metrics is not None:
            metrics.incidents_trusted_by_acl(True)
    if core.job_records_trusted:
        log.warning("act: %s", RECORD_TRUST_WARNING)
        if metrics is not None:
            metrics.job_records_trusted_by_acl(True)
    if not core.console_keys:
        log.warning("act: security.console_public_keys is empty: every operator command is refused and audited")

    def close() -> None:
        core.close(wait=True)
        core.save_state()
        if mirror is not None and not mirror.wait_durable(timeout_s=10):  # a broker outage must not block exit
            log.warning("act: exiting before the act-state topic has everything; the next start publishes it")
        producer.flush()
        producer.close()
        if bus is not None:
            bus.close()
        if mirror is not None:
            mirror.close()
        journal.close()

    return core, mirror, close


def _exit_fenced() -> None:
    """A newer act owns the state: never act beside it (like losing the Lease)."""
    log.error("act: another act took over the state topic; exiting")
    os._exit(1)


def _rails(cfg: ActionSettings) -> Rails:
    return Rails(CircuitBreaker(max_fraction=cfg.breaker_max_fraction, window_s=cfg.breaker_window_s,
                                fleet_size=cfg.fleet_size, min_job_size=cfg.min_job_size,
                                fleet_max_evictions=cfg.fleet_max_evictions),
                 Cooldown(cooldown_s=cfg.cooldown_s), StandbyPool(spares=list(cfg.standby_nodes)),
                 approval_kinds=list(cfg.approval_kinds), rollout=cfg.rollout.policy())


class _Refuse:
    """The executor of a dry run: a planned decision is never executed (dry-run decisions skip the runner)."""

    name = "dry-run"
    handles = frozenset(ACTIONS)

    def execute(self, command: ActionCommand, *, targets: list[str]) -> ActionResult:
        raise RuntimeError("dry run: nothing may be executed")


def _audit_rejected(publish: Callable[[Record], None], result: Any, reason: str) -> None:
    """A result that did not verify: audited, never counted."""
    publish(AuditEntry(ts=time.time(), event="result_rejected", subject_id=getattr(result, "command_id", ""),
                       actor="trainguard-act", detail={"job": getattr(result, "job", ""),
                                                       "node": getattr(result, "node", ""), "reason": reason}))
