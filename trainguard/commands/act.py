"""`trainguard act`: turn incidents into decisions and carry them out."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from schemas.actions import ACTIONS
from schemas.records import Decision, Incident
from trainguard.errors import UsageError
from trainguard.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("act", help="run the decision engine and an executor on incidents",
                       description="Consume incidents, decide a recovery plan for each (journaled, so a redelivered "
                       "incident is acted on once), publish the decision and audit entries, and (unless --dry-run) "
                       "execute the plan: each step through the first enabled executor that handles its action "
                       "(evictions through Kubernetes or Slurm, node-local steps through the `trainguard run` "
                       "agents), behind the circuit breaker, cooldown and approval rails. "
                       "Commands are signed with security.act_private_key and results accepted only when signed "
                       "by their node (security.node_public_keys); without keys only --dry-run starts "
                       "(docs/security.md).")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--executors", metavar="NAME[,NAME...]", type=_names,
                     help="the executors to enable, in priority order: each action goes to the first that handles "
                     "it (kubernetes, slurm: evict/cordon/uncordon; local: the node agents, which can also stop an "
                     "evicted node's process), e.g. kubernetes,local; a plan with an action none handles fails "
                     "before it starts (default: actions.executors, else local)")
    how.add_argument("--executor", metavar="NAME", type=lambda v: _names(v)[0],
                     help="older form: NAME carries out evictions, the node agents the rest "
                     "(--executor kubernetes = --executors kubernetes,local)")
    p.add_argument("--dry-run", action="store_true", help="decide and record, but execute nothing")
    p.add_argument("--max-incidents", type=int, help="exit after this many decisions")
    p.add_argument("--timeout", type=float, help="exit after this many seconds")
    p.add_argument("--log", type=Path, default=Path(".trainguard/actions/decisions.jsonl"),
                   help="where decisions are recorded locally (default: %(default)s)")
    p.add_argument("--loglevel", default="warn", choices=["crit", "error", "warn", "info", "debug"])
    p.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus metrics on this port (0: off)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    import faust
    import msgspec

    from schemas.topics import Topics
    from streams.act_app import create_act_app
    from streams.admin import ensure_configured_topics, require_broker

    console = Console()
    cfg = settings.actions
    dry_run = args.dry_run or cfg.dry_run
    topics = Topics(settings.topics.prefix)
    executors = _enabled(args, cfg)
    if not dry_run:  # before touching the broker: no keys, no start (one line, exit 2)
        settings.security.signer("act")
        settings.security.required_ring("node")
    require_broker(settings)
    ensure_configured_topics(settings)
    args.log.parent.mkdir(parents=True, exist_ok=True)

    def show(incident: Incident, decision: Decision) -> None:
        tag = "[yellow]DRY-RUN[/] " if decision.dry_run else ""
        console.print(f"{tag}[bold]{incident.kind}[/] incident {incident.id} on job {incident.job}"
                      f" (ranks {incident.ranks}, nodes {incident.nodes})")
        console.print(f"  decision: [cyan]{decision.reason}[/]  (rule {decision.rule}, status {decision.status})")
        with args.log.open("a") as f:
            f.write(json.dumps(msgspec.to_builtins(decision)) + "\n")

    core, close = build_core(settings, topics, executors=executors, dry_run=dry_run, on_decision=show)
    if args.metrics_port:
        core.metrics.serve(args.metrics_port)
    _wait_for_leadership(settings, console)
    mode = "dry-run" if dry_run else f"executors {_routes_line(core.runner.routes)}"
    if not settings.security.worker_public_keys:
        console.print("act: incidents are trusted by who may write them (Kafka ACLs); set "
                      "security.worker_public_keys to accept only incidents the worker signed")
    console.print(f"act: {mode}, consuming {topics.name('incidents')} on {settings.broker.servers}")
    app = create_act_app(settings, core, max_incidents=args.max_incidents, timeout_s=args.timeout)
    try:
        faust.Worker(app, loglevel=args.loglevel, quiet=True, redirect_stdouts=False).execute_from_commandline()
    except SystemExit as exc:  # the worker exits the process when it stops; finish our part first
        close()
        return int(exc.code or 0)
    close()
    return 0


def _wait_for_leadership(settings: Settings, console: Console) -> None:
    """With LEASE_NAME set (several replicas), act only while holding the Lease (streams/leader.py)."""
    import os

    from streams.leader import LeaseElector

    elector = LeaseElector.from_env(kube=settings.actions.kubernetes)
    if elector is None:
        return
    console.print(f"act: waiting for the Lease {elector.namespace}/{elector.name} as {elector.identity}")
    elector.wait_until_leader()
    console.print("act: leading")
    elector.keep_leading(on_lost=lambda: os._exit(1))  # never act beside a new leader


def build_core(settings: Settings, topics: Any, *, executors: list[str], dry_run: bool,
               on_decision: Any = None) -> tuple[Any, Callable[[], None]]:
    """Wire engine, journal, knowledge, rails, executors and the publishing edge from settings.

    Returns the `ActCore` and a function that waits for running plans and
    releases the Kafka clients. The Kafka clients are built by `streams.kafka_io`.
    """
    from functools import partial

    from actions.checkpoints import CheckpointRegistry
    from actions.engine import DecisionEngine
    from actions.ettr import EttrAccount
    from actions.executors import registry
    from actions.journal import Journal
    from actions.knowledge import JobKnowledge
    from actions.runner import PlanRunner
    from actions.selfcheck.fanout import FanOut
    from schemas.codec import Codec
    from schemas.records import AuditEntry, Record
    from schemas.topics import key_for
    from streams import kafka_io
    from streams.action_consumer import ActCore
    from streams.command_bus import KafkaCommandBus

    cfg, sec = settings.actions, settings.security
    # No default key: act refuses to execute anything it could not sign (one line, exit 2, via the CLI).
    signer = None if dry_run else sec.signer("act")
    node_keys = sec.ring("node") if dry_run else sec.required_ring("node")
    checkpoints = CheckpointRegistry(max_jobs=cfg.max_jobs)
    engine = DecisionEngine(checkpoints, dry_run=dry_run, retry_window_s=cfg.retry_window_s,
                            network_confirmations=cfg.network_confirmations, max_jobs=cfg.max_jobs)
    journal = Journal(cfg.state_dir / "journal.sqlite")
    knowledge = JobKnowledge(journal, engine, checkpoints)
    knowledge.load()  # a restarted act knows every checkpoint, topology and earlier incident the old one did
    # Reconnect fast after a broker outage (kafka-python backs off up to 30 s by default): the first
    # command after the broker returns must not wait for a backoff timer.
    producer = kafka_io.producer(settings.broker, reconnect_backoff_max_ms=500)
    codec = Codec()

    def publish(record: Record) -> None:
        """Send one record to its topic (audit entries key by job or subject). Thread-safe."""
        rkey = key_for(record) if not isinstance(record, AuditEntry) else str(record.detail.get("job", "")).encode()
        producer.send(topics.for_record(record), key=rkey or None, value=codec.encode(record))

    ettr = EttrAccount(max_jobs=cfg.max_jobs)
    bus: KafkaCommandBus | None = None
    routes = registry.Routes([_Refuse()])  # dry run: decisions are journaled, nothing is ever sent
    if signer is not None:
        bus = KafkaCommandBus(broker=settings.broker, topics=topics, signer=signer, node_keys=node_keys,
                              ttl_s=sec.command_ttl_s, on_reject=partial(_audit_rejected, publish))
        routes = registry.build(executors, registry.ExecutorContext(cfg, time.time, bus))
    runner = PlanRunner(journal=journal, rails=_rails(cfg), executors=routes, sink=publish, clock=time.time,
                        topologies=engine.topologies, reported_attempt=ettr.attempt, max_jobs=cfg.max_jobs,
                        fanout=FanOut(cfg.selfcheck, clock=time.time))
    core = ActCore(engine=engine, runner=runner, knowledge=knowledge, publish=publish, ettr=ettr,
                   on_decision=on_decision, plan_workers=cfg.plan_workers, max_jobs=cfg.max_jobs,
                   operator_max_age_s=cfg.operator_max_age_s, node_keys=node_keys, worker_keys=sec.ring("worker"))

    def close() -> None:
        core.close(wait=True)
        producer.flush()
        producer.close()
        if bus is not None:
            bus.close()
        journal.close()

    return core, close


def _rails(cfg: Any) -> Any:
    from actions.runner import Rails
    from actions.safety import CircuitBreaker, Cooldown
    from actions.standby import StandbyPool

    return Rails(CircuitBreaker(max_fraction=cfg.breaker_max_fraction, window_s=cfg.breaker_window_s,
                                fleet_size=cfg.fleet_size, min_job_size=cfg.min_job_size,
                                fleet_max_evictions=cfg.fleet_max_evictions),
                 Cooldown(cooldown_s=cfg.cooldown_s), StandbyPool(spares=list(cfg.standby_nodes)),
                 approval_kinds=list(cfg.approval_kinds))


class _Refuse:
    """The executor of a dry run: a planned decision is never executed (dry-run decisions skip the runner)."""

    name = "dry-run"
    handles = frozenset(ACTIONS)

    def execute(self, command: Any, *, targets: list[str]) -> Any:
        raise RuntimeError("dry run: nothing may be executed")


def _audit_rejected(publish: Callable[[Any], None], result: Any, reason: str) -> None:
    """A result that did not verify: audited, never counted."""
    from schemas.records import AuditEntry

    publish(AuditEntry(ts=time.time(), event="result_rejected", subject_id=getattr(result, "command_id", ""),
                       actor="trainguard-act", detail={"job": getattr(result, "job", ""),
                                                       "node": getattr(result, "node", ""), "reason": reason}))


def _enabled(args: argparse.Namespace, cfg: Any) -> list[str]:
    """The executors to enable (CLI over config), checked before anything starts: one line, exit 2."""
    from actions.executors import registry

    names = args.executors or (registry.expand_legacy(args.executor) if args.executor else cfg.enabled_executors())
    try:
        registry.Routes([registry.load(name) for name in registry.check_names(names)])  # the classes route too
    except registry.UnknownExecutor as exc:
        raise UsageError(f"act: {exc}") from None
    return list(names)


def _names(value: str) -> list[str]:
    """`--executors a,b`: registered names, each once (argparse turns the error into one line, exit 2)."""
    from actions.executors.registry import UnknownExecutor, check_names

    try:
        return check_names([n.strip() for n in value.split(",") if n.strip()])
    except UnknownExecutor as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _routes_line(routes: Any) -> str:
    """`kubernetes (evict_node, ...), local (...)`, and what nothing handles."""
    table = routes.describe()
    missing = table.pop("unhandled")
    line = ", ".join(f"{name} ({', '.join(actions)})" for name, actions in table.items())
    return line + (f"; no executor for {', '.join(missing)}: plans with these fail" if missing else "")
