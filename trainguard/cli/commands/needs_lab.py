"""Commands that run offline work import `lab` lazily, and say so in one line when it is missing.

The runtime image (worker, act, collectors, agents) is built without the `lab` package
(simulators, backtest, demo, local broker) nor its extra dependencies, yet ships the same
CLI. A command that needs lab is decorated with `needs_lab`: its handler imports lab inside
the function, and a missing lab (or a missing dependency of the `lab` extra) becomes a
`UsageError`, which the CLI prints as one line with exit code 2 instead of a traceback.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable

from trainguard.cli.errors import UsageError
from trainguard.settings import Settings

Handler = Callable[[argparse.Namespace, Settings], int]

# What `pip install 'trainguard[lab]'` brings: the lab package (trainguard.lab) and its extra's dependencies.
LAB_MODULES = frozenset({"lab", "matplotlib"})


def _missing(name: str) -> str:
    """The part of the install a missing module belongs to: `lab` for trainguard.lab..., else its top-level name."""
    if name == "trainguard.lab" or name.startswith("trainguard.lab."):
        return "lab"
    return name.split(".")[0]
INSTALL_HINT = "pip install 'trainguard[lab]' (the runtime image leaves it out)"


def needs_lab(command: str) -> Callable[[Handler], Handler]:
    """Decorate the handler of `trainguard COMMAND`, which imports lab inside itself."""

    def wrap(handler: Handler) -> Handler:
        @functools.wraps(handler)
        def run(args: argparse.Namespace, settings: Settings) -> int:
            try:
                return handler(args, settings)
            except ModuleNotFoundError as exc:
                missing = _missing(exc.name or "")
                if missing not in LAB_MODULES:
                    raise
                raise UsageError(f"{command} needs the lab package ({missing} is not installed): "
                                 f"{INSTALL_HINT}") from None

        return run

    return wrap
