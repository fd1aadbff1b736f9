"""`trainguard act`: turn incidents into decisions and carry them out."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from schemas.records import Decision, Incident
from trainguard.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("act", help="run the decision engine on incidents",
                       description="Consume incidents, decide a recovery plan for each, publish the decision "
                       "and an audit entry, and (unless --dry-run) execute it.")
    p.add_argument("--dry-run", action="store_true", help="decide and record, but execute nothing")
    p.add_argument("--max-incidents", type=int, help="exit after this many decisions")
    p.add_argument("--timeout", type=float, help="exit after this many seconds")
    p.add_argument("--log", type=Path, default=Path(".trainguard/actions/decisions.jsonl"),
                   help="where decisions are recorded locally (default: %(default)s)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    import msgspec

    from actions.checkpoints import CheckpointRegistry
    from actions.engine import DecisionEngine
    from schemas.topics import Topics
    from streams.action_consumer import ActionLoop
    from streams.admin import ensure_topics

    console = Console()
    dry_run = args.dry_run or settings.actions.dry_run
    topics = Topics(settings.topics.prefix)
    ensure_topics(settings.broker.servers, topics.all(),
                  partitions=settings.topics.partitions, replication=settings.topics.replication)
    checkpoints = CheckpointRegistry()
    loop = ActionLoop(settings.broker.servers, topics, DecisionEngine(checkpoints, dry_run=dry_run),
                      checkpoints, group_id=settings.actions.group_id)
    args.log.parent.mkdir(parents=True, exist_ok=True)

    def show(incident: Incident, decision: Decision) -> None:
        tag = "[yellow]DRY-RUN[/] " if decision.dry_run else ""
        console.print(f"{tag}[bold]{incident.kind}[/] incident {incident.id} on job {incident.job}"
                      f" (ranks {incident.ranks}, nodes {incident.nodes})")
        console.print(f"  decision: [cyan]{decision.reason}[/]  (rule {decision.rule})")
        with args.log.open("a") as f:
            f.write(json.dumps(msgspec.to_builtins(decision)) + "\n")

    console.print(f"act: {'dry-run, ' if dry_run else ''}consuming {topics.name('incidents')} on {settings.broker.servers}")
    loop.run(show, max_incidents=args.max_incidents, timeout_s=args.timeout)
    return 0
