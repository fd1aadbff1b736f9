"""`trainguard broker start|stop|status`: the local Kafka broker."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rich.console import Console

from trainguard.cli.commands.needs_lab import needs_lab
from trainguard.settings import Settings

if TYPE_CHECKING:  # lab is imported only when the command runs (the runtime image has none)
    from trainguard.lab.localkafka.broker import LocalBroker


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("broker", help="run the local Apache Kafka broker (KRaft, single node)",
                       description="Run a real single-node Kafka broker on 127.0.0.1 for the demo and tests. "
                       "Jars are fetched from Maven Central once via the bundled pom.xml.")
    actions = p.add_subparsers(dest="broker_action", metavar="ACTION", required=True)
    start = actions.add_parser("start", help="format storage if needed, start, and wait until it answers")
    start.add_argument("--fresh", action="store_true", help="wipe the data directory first")
    start.add_argument("--port", type=int, help="listener port (default: broker.port)")
    for name, text in (("stop", "stop the broker cleanly"), ("status", "say whether the broker is up")):
        a = actions.add_parser(name, help=text)
        a.add_argument("--port", type=int, help="listener port (default: broker.port)")
    p.set_defaults(handler=run)


@needs_lab("broker")
def run(args: argparse.Namespace, settings: Settings) -> int:
    from trainguard.lab.localkafka.broker import BrokerError, LocalBroker

    console = Console()
    broker_settings = settings.broker
    if args.port:
        broker_settings = broker_settings.model_copy(update={"port": args.port})
    broker = LocalBroker(broker_settings)
    try:
        if args.broker_action == "start":
            pid = broker.start(fresh=args.fresh)
            console.print(f"[green]broker up[/] on {broker_settings.servers} (pid {pid}, data {broker.paths.data_dir})")
        elif args.broker_action == "stop":
            stopped = broker.stop()
            console.print("broker stopped" if stopped else "broker was not running")
        else:
            return _status(broker, console)
    except BrokerError as exc:
        console.print(f"[red]broker error:[/] {exc}")
        return 1
    return 0


def _status(broker: LocalBroker, console: Console) -> int:
    pid = broker.pid()
    if pid is None:
        console.print("broker: [red]down[/]")
        return 1
    try:
        topics = broker.topics()
    except Exception as exc:
        console.print(f"broker: [yellow]process {pid} up but not answering[/] ({exc})")
        return 1
    console.print(f"broker: [green]up[/] on {broker.settings.servers} (pid {pid}), {len(topics)} topics")
    return 0
