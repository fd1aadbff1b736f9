"""`trainguard demo`: a real PyTorch job survives injected faults, end to end."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from rich.console import Console

from trainguard.cli.commands.needs_lab import needs_lab
from trainguard.cli.errors import UsageError
from trainguard.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="run the end-to-end demo on the local broker",
                       description="Start the worker, the action consumer and node agents running a real "
                       "torch.distributed job (gloo, CPU), inject a NaN, a hang, a slow node, a bit flip, an "
                       "XID 79 and a bad hot update one after another, and show how each is detected, decided "
                       "and recovered; end with the ETTR and a timeline PNG.")
    p.add_argument("--out", type=Path, default=Path(".trainguard/demo"),
                   help="run directory root (default: %(default)s)")
    p.add_argument("--short", action="store_true", help="fewer healthy steps between faults (as the e2e test)")
    p.add_argument("--faults", metavar="KINDS",
                   help="comma-separated subset, in order, of: nan,hang,slow,bitflip,xid79,bad_code (default: all)")
    p.add_argument("--console", action="store_true",
                   help="also run the operator console (`trainguard ui`) and print its URL and tokens")
    p.add_argument("--console-port", type=int, default=8765, help="the console's port (default: %(default)s)")
    p.add_argument("--hold", type=float, default=0.0, metavar="SECONDS",
                   help="keep the stack (and console) running this long after the last fault (default: 0)")
    p.set_defaults(handler=run)


@needs_lab("demo")
def run(args: argparse.Namespace, settings: Settings) -> int:
    from trainguard.lab.demo.console import ConsoleReporter
    from trainguard.lab.demo.runner import DemoRunner
    from trainguard.lab.demo.scenario import DemoScenario, short_scenario
    from trainguard.lab.demo.summary import plot_timeline, print_summary
    from trainguard.lab.localkafka.broker import BrokerError, LocalBroker

    console = Console()
    # SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C, so every demo process is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    scenario = short_scenario() if args.short else DemoScenario()
    if args.faults:  # checked before anything starts
        try:
            scenario = scenario.only(args.faults.split(","))
        except ValueError as exc:
            raise UsageError(f"demo: --faults: {exc}") from None
    if not settings.broker.bootstrap:
        try:
            LocalBroker(settings.broker).start()
        except BrokerError as exc:
            raise UsageError(f"demo: local broker: {exc}") from None
    run_dir = (args.out / time.strftime("%Y%m%d-%H%M%S")).resolve()
    outcome = DemoRunner(scenario, settings, run_dir, ConsoleReporter(console),
                         console_port=args.console_port if args.console else None, hold_s=args.hold).run()
    console.rule("[bold]summary")
    print_summary(outcome, scenario.job, console)
    png = plot_timeline(outcome, run_dir / "timeline.png")
    console.print(f"timeline: {png}\nlogs: {run_dir}")
    return 0 if all(f.ok for f in outcome.faults) else 1
