"""`trainguard actions ...`: the operator's view of the decision journal.

`log` shows recent decisions with their reasons, `approve` releases a
decision held by approval mode, `reset-breaker` closes a tripped circuit
breaker (the running `trainguard act` picks both up within a poll), and
`pool` shows the warm-standby pool, and `return-node` puts a repaired node
back in it, only with a passing self-check report for that node. `report` is
the shadow report (actions/shadow.py): per rule, what act decided in a window
and what it would have done, to read before promoting a kind from observe. `verdict` marks an incident a
true fault, a false alarm or unsure (act applies it at its next poll, audited under the OS user's name;
actions/verdicts.py). (`actions-log` is an alias: the CLI
finds command modules by name, and this module is `actions_log`.)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from trainguard.cli.errors import UsageError
from trainguard.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("actions", aliases=["actions-log"],
                       help="show decisions and the shadow report, approve them, reset the circuit breaker",
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
    report = verbs.add_parser("report", help="the shadow report: per rule, decisions, what they would have done, "
                              "what the breaker would have blocked, unproductive time saved",
                              description="Per rule over a window: decisions (observed, acted, held), the "
                              "evictions, restarts and rollbacks their plans name, how many observed ones the "
                              "breaker would have blocked, and the unproductive time acting could have saved "
                              "(from the ETTR account: 'measured' against the rule's own automated responses, "
                              "else an 'upper bound').")
    report.add_argument("--since", default="7d", type=duration_s,
                        help="window ending now: 90s, 30m, 12h, 7d (default: %(default)s)")
    report.add_argument("--job", default="", help="only this job")
    report.add_argument("--json", action="store_true", help="one JSON object with a row per rule")
    verdict = verbs.add_parser("verdict", help="mark an incident a true fault, a false alarm or unsure",
                               description="Leave a verdict on an incident act decided on, for act to apply at "
                               "its next poll (journaled, audited under your user name): it makes each rule's and "
                               "detector's precision (trainguard_rule_precision, the shadow report).")
    verdict.add_argument("incident_id")
    verdict.add_argument("verdict", choices=["true", "false", "unsure"],
                         help="true: a real fault; false: a false alarm; unsure")
    verdict.add_argument("--note", default="", help="why (kept with the verdict and in the audit trail)")
    p.set_defaults(handler=run)


def duration_s(text: str) -> float:
    """Seconds in `90s`, `30m`, `12h` or `7d` (a bare number is seconds); argparse's type for --since."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        value = float(number) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 90s, 30m, 12h or 7d") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: a window must be a positive, finite duration")
    return value


def run(args: argparse.Namespace, settings: Settings) -> int:
    from trainguard.actions.journal import Journal

    path = settings.actions.state_dir / "journal.sqlite"
    if not path.exists():
        raise UsageError(f"actions: no journal at {path} (has `trainguard act` run here?)")
    journal = Journal(path)
    try:
        if args.verb == "report":
            return _report(args, journal, settings)
        verbs = {"log": _log, "approve": _approve, "reset-breaker": _reset, "pool": _pool, "return-node": _return,
                 "verdict": _verdict}
        return verbs[args.verb](args, journal)
    finally:
        journal.close()


def _log(args: argparse.Namespace, journal: object) -> int:
    import msgspec

    from trainguard.actions.journal import Journal

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


def _report(args: argparse.Namespace, journal: object, settings: Settings) -> int:
    import time

    from trainguard.actions.journal import Journal
    from trainguard.actions.rollout import RolloutPolicy
    from trainguard.actions.shadow import responses, shadow_report
    from trainguard.actions.verdicts import counts_by_rule, precision

    assert isinstance(journal, Journal)
    since = time.time() - args.since
    decisions = journal.since(since, args.job)
    cfg = settings.actions
    policy = RolloutPolicy.restore(journal.get_state("rollout"), cfg.rollout.policy())  # as act would hold it
    modes = {d.rule: policy.mode_for(d.kind, d.rule, cfg.approval_kinds) for d in decisions}
    shown = precision(journal.get_state("verdicts"), now=time.time(), window_s=cfg.rollout.precision_window_s)
    rows = shadow_report(decisions, modes=modes, response_s=responses(journal.states("ettr:")),
                         verdicts=counts_by_rule(shown["rules"]))
    if args.json:
        print(json.dumps({"since": since, "job": args.job, "rules": [r.as_dict() for r in rows]}))
        return 0
    print_report(rows, title=f"shadow report: {len(decisions)} decisions in the last {_span(args.since)}"
                 + (f" of job {args.job}" if args.job else ""))
    return 0


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def print_report(rows: list[Any], *, title: str) -> None:
    """The per-rule table (also `trainguard backtest --report`'s)."""
    table = Table(title=title)
    for col in ("rule", "mode", "decisions observed/acted/held", "would do", "breaker would block",
                "unproductive s", "saved s (basis)", "verdicts true/false/unsure"):
        table.add_column(col, overflow="fold")
    for r in rows:
        verdicts = "/".join(str(r.verdicts.get(v, 0)) for v in ("true", "false", "unsure")) if r.verdicts else "-"
        saved = f"{r.saved_s:.0f} ({r.basis})" if r.basis else "-"
        would = f"evict {r.evictions} ({len(r.nodes)} nodes), {r.restarts} restarts, {r.rollbacks} rollbacks"
        table.add_row(r.rule, r.mode or "-", f"{r.decisions} {r.observed}/{r.acted}/{r.held}", would,
                      str(r.would_block), f"{r.unproductive_s:.0f}", saved, verdicts)
    Console().print(table if rows else f"{title}: none")


def _approve(args: argparse.Namespace, journal: object) -> int:
    import msgspec

    from trainguard.actions.journal import Journal

    assert isinstance(journal, Journal)
    decision = journal.get(args.decision_id)
    if decision is None or decision.status != "awaiting_approval":
        raise UsageError(f"actions: no decision {args.decision_id} awaiting approval")
    journal.update_decision(msgspec.structs.replace(decision, status="planned"))
    print(f"approved {decision.id}: {decision.reason}")
    return 0


def _reset(args: argparse.Namespace, journal: object) -> int:
    from trainguard.actions.journal import Journal

    assert isinstance(journal, Journal)
    journal.request_breaker_reset()
    state = journal.get_state("rails").get("breaker", {})
    was = f"tripped ({state.get('reason', '')})" if state.get("tripped") else "not tripped"
    print(f"circuit breaker reset requested (it was {was}); `trainguard act` applies it at its next poll")
    return 0


def _pool(args: argparse.Namespace, journal: object) -> int:
    from trainguard.actions.journal import Journal

    assert isinstance(journal, Journal)
    pool = journal.get_state("rails").get("pool", {})
    spares, swaps = pool.get("spares", []), pool.get("swaps", {})
    print(json.dumps({"size": len(spares), "exhausted": not spares, "spares": spares, "swaps": swaps}))
    return 0


def _return(args: argparse.Namespace, journal: object) -> int:
    from trainguard.actions.journal import Journal

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


def _verdict(args: argparse.Namespace, journal: object) -> int:
    import getpass
    import time
    import uuid

    from trainguard.actions.journal import Journal
    from trainguard.actions.verdicts import CLI_VERDICT_PREFIX

    assert isinstance(journal, Journal)
    if journal.decision_for(args.incident_id) is None:
        raise UsageError(f"actions: no decision for incident {args.incident_id} in the journal")
    journal.put_state(CLI_VERDICT_PREFIX + uuid.uuid4().hex,
                      {"incident": args.incident_id, "verdict": args.verdict, "note": args.note,
                       "operator": f"{getpass.getuser()} (cli)", "ts": time.time()})
    print(f"incident {args.incident_id} marked {args.verdict}; `trainguard act` applies it at its next poll")
    return 0
