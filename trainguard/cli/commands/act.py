"""`trainguard act`: turn incidents into decisions and carry them out."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from trainguard.cli.errors import UsageError
from trainguard.schemas.records import Decision, Incident
from trainguard.settings import Settings

if TYPE_CHECKING:
    from trainguard.actions.rollout import RolloutPolicy


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

    from trainguard.schemas.topics import Topics
    from trainguard.streams.act.factory import ACL_TRUST_WARNING, RECORD_TRUST_WARNING, create_action_app
    from trainguard.streams.admin import ensure_configured_topics, require_broker

    console = Console()
    cfg = settings.actions
    dry_run = args.dry_run or cfg.dry_run
    topics = Topics(settings.topics.prefix)
    executors = _enabled(args, cfg)
    if not dry_run:  # before touching the broker: no keys, no start (one line, exit 2)
        settings.security.signer("act")
        settings.security.required_ring("node")
        settings.security.incident_ring()  # no worker key: no start, unless incidents_trusted_by_acl
    require_broker(settings)
    ensure_configured_topics(settings)
    args.log.parent.mkdir(parents=True, exist_ok=True)

    def show(incident: Incident, decision: Decision) -> None:
        tag = "[yellow]DRY-RUN[/] " if decision.dry_run else \
            "[yellow]OBSERVED (nothing sent)[/] " if decision.status == "observed" else ""
        console.print(f"{tag}[bold]{incident.kind}[/] incident {incident.id} on job {incident.job}"
                      f" (ranks {incident.ranks}, nodes {incident.nodes})")
        console.print(f"  decision: [cyan]{decision.reason}[/]  (rule {decision.rule}, status {decision.status})")
        with args.log.open("a") as f:
            f.write(json.dumps(msgspec.to_builtins(decision)) + "\n")

    _wait_for_leadership(settings, console)  # before reading act's state: the leader owns it
    built = create_action_app(settings, executors=executors, dry_run=dry_run, on_decision=show,
                              max_incidents=args.max_incidents, timeout_s=args.timeout)
    if built.mirror is not None and built.mirror.restored is not None:
        r = built.mirror.restored
        console.print(f"act: state from {topics.name('act-state')} and the journal (epoch {r.epoch}, "
                      f"{len(r.to_local)} items taken, {len(r.to_publish)} published)")
    if args.metrics_port:
        built.metrics.serve(args.metrics_port)
    mode = "dry-run" if dry_run else f"executors {_routes_line(built.core.runner.routes)}"
    if not built.core.worker_keys:
        console.print(f"act: WARNING: {ACL_TRUST_WARNING}")
    if built.core.job_records_trusted:
        console.print(f"act: WARNING: {RECORD_TRUST_WARNING}")
    console.print(f"act: {mode}, consuming {topics.name('incidents')} on {settings.broker.servers}")
    console.print(f"act: rollout {_rollout_line(built.core.runner.rails.rollout)}")
    try:
        faust.Worker(built.app, loglevel=args.loglevel, quiet=True,
                     redirect_stdouts=False).execute_from_commandline()
    except SystemExit as exc:  # the worker exits the process when it stops; finish our part first
        built.close()
        return int(exc.code or 0)
    built.close()
    return 0


def _rollout_line(policy: RolloutPolicy) -> str:
    """The modes in force, most general first: what this act may do on its own."""
    overrides = [f"{k} {m}" for k, m in sorted(policy.kinds.items())] + \
        [f"rule {r} {m}" for r, m in sorted(policy.rules.items())]
    return f"default {policy.default}" + (f"; {', '.join(overrides)}" if overrides else "") + \
        ("" if policy.default == "auto" else " (observed decisions send nothing; promote in actions.rollout "
         "or with the console)")


def _wait_for_leadership(settings: Settings, console: Console) -> None:
    """With LEASE_NAME set (several replicas), act only while holding the Lease (streams/act/leader.py)."""
    import os

    from trainguard.streams.act.leader import LeaseElector

    elector = LeaseElector.from_env(kube=settings.actions.kubernetes)
    if elector is None:
        return
    console.print(f"act: waiting for the Lease {elector.namespace}/{elector.name} as {elector.identity}")
    elector.wait_until_leader()
    console.print("act: leading")
    elector.keep_leading(on_lost=lambda: os._exit(1))  # never act beside a new leader


def _enabled(args: argparse.Namespace, cfg: Any) -> list[str]:
    """The executors to enable (CLI over config), checked before anything starts: one line, exit 2."""
    from trainguard.actions.executors import registry

    names = args.executors or (registry.expand_legacy(args.executor) if args.executor else cfg.enabled_executors())
    try:
        registry.Routes([registry.load(name) for name in registry.check_names(names)])  # the classes route too
    except registry.UnknownExecutor as exc:
        raise UsageError(f"act: {exc}") from None
    return list(names)


def _names(value: str) -> list[str]:
    """`--executors a,b`: registered names, each once (argparse turns the error into one line, exit 2)."""
    from trainguard.actions.executors.registry import UnknownExecutor, check_names

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
