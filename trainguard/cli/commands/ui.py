"""`trainguard ui`: the operator console, a web page and JSON API over the topics act uses.

A separate service rather than a port of `trainguard act`: it only reads the
topics act reads and writes, so several replicas can run behind a load
balancer, it holds no command-signing key, and it does not depend on act's
internals. Operator actions go out as `OperatorCommand`s on the `operator`
topic, with the authenticated operator's name; act applies and audits them.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from trainguard.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("ui", help="serve the operator console (fleet, jobs, incidents, approvals) over HTTP",
                       description="Serve the operator web console and its JSON API (/api, documented at GET /api) "
                       "from the incidents, decisions, actions, results, audit and training topics. Viewers see; "
                       "operators approve/reject decisions, reset the breaker and return repaired nodes, which "
                       "`trainguard act` applies from the operator topic.")
    p.add_argument("--host", help="address to listen on (default: console.host)")
    p.add_argument("--port", type=int, help="port to listen on, 0 for any free port (default: console.port)")
    p.add_argument("--credentials", type=Path, help="credentials YAML (default: console.credentials_file)")
    p.add_argument("--timeout", type=float, help="exit after this many seconds")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    cfg = settings.console.model_copy(update={k: v for k, v in (("host", args.host), ("port", args.port),
                                                                ("credentials_file", args.credentials))
                                              if v is not None})
    try:
        return asyncio.run(_serve(settings, cfg, args.timeout))
    except _Refused as exc:
        print(f"trainguard ui: {exc}", file=sys.stderr)
        return 2


class _Refused(RuntimeError):
    """A one-line reason the console cannot start."""


async def _serve(settings: Settings, cfg: object, timeout: float | None) -> int:
    from aiohttp import web
    from aiokafka.errors import KafkaError

    from trainguard.streams.console.factory import ConsoleRefused, create_console
    from trainguard.streams.console.settings import ConsoleSettings

    assert isinstance(cfg, ConsoleSettings)
    try:
        app = create_console(settings, cfg)
    except ConsoleRefused as exc:
        raise _Refused(str(exc)) from None
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=2.0)
    try:
        await runner.setup()
    except KafkaError as exc:
        raise _Refused(f"broker {settings.broker.servers} unreachable: {exc}") from None
    site = web.TCPSite(runner, cfg.host, cfg.port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise _Refused(f"console.port {cfg.port}: {exc.strerror or exc}") from None
    port = runner.addresses[0][1]
    print(f"trainguard ui: console at http://{cfg.host}:{port}/ (API: /api)", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await asyncio.wait_for(stop.wait(), timeout)
    except TimeoutError:
        pass
    await runner.cleanup()
    return 0
