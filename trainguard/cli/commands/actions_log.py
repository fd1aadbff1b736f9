"""`trainguard actions ...`: the operator's view of the decision journal.

`log` shows recent decisions with their reasons, `approve` releases a
decision held by approval mode, `reset-breaker` closes a tripped circuit
breaker (the running `trainguard act` picks both up within a poll), and
`pool` shows the warm-standby pool, and `return-node` puts a repaired node
back in it, only with a passing self-check report for that node. (`actions-log` is an alias: the CLI
finds command modules by name, and this module is `actions_log`.)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from trainguard.cli.errors import UsageError
from trainguard.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("actions", aliases=["actions-log"],
                       help="show decisions, approve them, reset the circuit breaker",
                       description="Read and steer the action journal of `trainguard act` (actions.state_dir).")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    log = verbs.add_parser("log", help="recent decisions with their rule, reason and step results")
    log.add_argument("--job", default="", help="only this job")
    log.add_argument("--limit", type=int, default=20, help="how many (default: %(default)s)")
    log.add_argument("--json", action="store_true", help="one JSON object per line")
    approve = verbs.add_parser("approve", help="release a decision waiting for approval")
    approve.add_argument("decision_id")
    verbs.add_parser("reset-breaker", help="close a tripped circuit breaker")
    verbs.add_parser("pool", help="warm-standby pool size and the swaps made")
    back = verbs.add_parser("return-node", help="return a repaired node to the standby pool, "
                            "given its passing `trainguard selfcheck` report")
    back.add_argument("node")
    back.add_argument("--report", type=Path, required=True,
                      help="JSON printed by `trainguard selfcheck --machines NODE` (must say passed: true)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from actions.journal import Journal

    path = settings.actions.state_dir / "journal.sqlite"
    if not path.exists():
        raise UsageError(f"actions: no journal at {path} (has `trainguard act` run here?)")
    journal = Journal(path)
    try:
        verbs = {"log": _log, "approve": _approve, "reset-breaker": _reset, "pool": _pool, "return-node": _return}
        return verbs[args.verb](args, journal)
    finally:
        journal.close()


def _log(args: argparse.Namespace, journal: object) -> int:
    import msgspec

    from actions.journal import Journal

    assert isinstance(journal, Journal)
    decisions = journal.recent(args.limit, args.job)
    if args.json:
        for d in decisions:
            steps = [msgspec.to_builtins(r) for r in journal.steps(d.id)]
            print(json.dumps({**msgspec.to_builtins(d), "steps": steps}))
        return 0
    table = Table(title="recent decisions (newest first)")
    for col in ("decision", "job", "kind", "status", "rule", "reason", "steps"):
        table.add_column(col, overflow="fold")
    for d in decisions:
        done = ", ".join(f"{r.action}:{r.status}" for r in journal.steps(d.id))
        status = f"{d.status} (dry-run)" if d.dry_run else d.status
        table.add_row(d.id, d.job, d.kind, status, d.rule, d.reason, done)
    Console().print(table)
    return 0


def _approve(args: argparse.Namespace, journal: object) -> int:
    import msgspec

    from actions.journal import Journal

    assert isinstance(journal, Journal)
    decision = journal.get(args.decision_id)
    if decision is None or decision.status != "awaiting_approval":
        raise UsageError(f"actions: no decision {args.decision_id} awaiting approval")
    journal.update_decision(msgspec.structs.replace(decision, status="planned"))
    print(f"approved {decision.id}: {decision.reason}")
    return 0


def _reset(args: argparse.Namespace, journal: object) -> int:
    from actions.journal import Journal

    assert isinstance(journal, Journal)
    journal.request_breaker_reset()
    state = journal.get_state("rails").get("breaker", {})
    was = f"tripped ({state.get('reason', '')})" if state.get("tripped") else "not tripped"
    print(f"circuit breaker reset requested (it was {was}); `trainguard act` applies it at its next poll")
    return 0


def _pool(args: argparse.Namespace, journal: object) -> int:
    from actions.journal import Journal

    assert isinstance(journal, Journal)
    pool = journal.get_state("rails").get("pool", {})
    spares, swaps = pool.get("spares", []), pool.get("swaps", {})
    print(json.dumps({"size": len(spares), "exhausted": not spares, "spares": spares, "swaps": swaps}))
    return 0


def _return(args: argparse.Namespace, journal: object) -> int:
    from actions.journal import Journal

    assert isinstance(journal, Journal)
    try:
        report = json.loads(args.report.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"actions: --report {args.report}: {exc}") from None
    machines = report.get("machines") or [m for s in report.get("stages", []) for m in s.get("detail", {}).get(
        "digests", {})]
    if report.get("passed") is not True or args.node not in machines:
        print(f"trainguard actions: {args.node} stays out: the report is not a passing self-check of it")
        return 1
    journal.request_node_return(args.node)
    print(f"{args.node} queued for the standby pool; `trainguard act` adds it at its next poll")
    return 0
