"""The `trainguard` command line.

Each subcommand lives in its own module under `trainguard.cli.commands` and
exposes `register(subparsers)`; this module only wires them together, loads
the configuration once and turns a bad value into one line and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from trainguard import __version__
from trainguard.cli.errors import UsageError
from trainguard.schemas.kafka_config import SecretError
from trainguard.schemas.signing import KeyFileError
from trainguard.settings import ConfigError, load_settings
from trainguard.streams.admin import BrokerUnreachable

COMMANDS: tuple[str, ...] = (
    "broker",
    "worker",
    "act",
    "alerts",
    "actions-log",
    "ettr",
    "selfcheck",
    "schemas",
    "collect",
    "run",
    "simulate",
    "record",
    "replay",
    "backtest",
    "ettr-sim",
    "detectors",
    "demo",
    "ui",
    "keys",
)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line (not the whole usage) and exit code 2.

    Sub-command parsers inherit the class, so this holds at every level.
    """

    def error(self, message: str) -> NoReturn:
        hint = f" (see {self.prog} --help)"
        self.exit(2, f"{self.prog}: error: {message}{hint}\n")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, one subparser per command module."""
    parser = OneLineParser(
        prog="trainguard",
        description="Keep large GPU training jobs productive: detect faults in real time, isolate fast, recover.",
    )
    parser.add_argument("--version", action="version", version=f"trainguard {__version__}")
    parser.add_argument(
        "-c", "--config", metavar="FILE", help="YAML config file (TRAINGUARD_* environment variables override it)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"trainguard.cli.commands.{name.replace('-', '_')}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.config)
        code = args.handler(args, settings)
    except (ConfigError, KeyFileError, SecretError, UsageError, BrokerUnreachable) as exc:
        print(f"trainguard: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return int(code or 0)
