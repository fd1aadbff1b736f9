"""`trainguard worker`: the Faust stream-processing worker running the detectors."""

from __future__ import annotations

import argparse

from trainguard.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("worker", help="run the detection worker (Faust)",
                       description="Consume the telemetry topics, run the configured detectors, and publish "
                       "anomalies, incidents and dead letters.")
    p.add_argument("--loglevel", default="warn", choices=["crit", "error", "warn", "info", "debug"])
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    import faust

    from trainguard.streams.admin import ensure_configured_topics, require_broker
    from trainguard.streams.worker.factory import create_worker_app
    from trainguard.streams.worker.heap import settle_after_startup

    require_broker(settings)
    ensure_configured_topics(settings)
    app = create_worker_app(settings)
    worker = faust.Worker(app, loglevel=args.loglevel, quiet=True)
    settle_after_startup()  # the collector took ~10% of the hot path with its defaults (streams/worker/heap.py)
    worker.execute_from_commandline()
    return 0
