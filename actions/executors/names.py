"""Executor names: which are registered, and how the configured list is checked and read.

Apart from `actions.executors.registry` so that the settings can check the
configured names without importing what builds executors from the settings
(`ExecutorContext` holds an `ActionSettings`): no import cycle between the two.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import entry_points

GROUP = "trainguard.executors"
LOCAL = "local"  # the node agents' executor: what `--executor NAME` adds after NAME


class UnknownExecutor(ValueError):
    """A configured executor name is not registered, or the enabled list cannot work."""


def available() -> dict[str, str]:
    """Registered executor names -> 'module:Class' (not imported)."""
    return {ep.name: ep.value for ep in entry_points(group=GROUP)}


def expand_legacy(name: str) -> list[str]:
    """`--executor NAME` as it always meant: NAME for what it handles, the node agents for the rest.

    >>> expand_legacy("kubernetes"), expand_legacy("local")
    (['kubernetes', 'local'], ['local'])
    """
    return [name] if name == LOCAL else [name, LOCAL]


def check_names(names: Sequence[str]) -> list[str]:
    """The names, each registered and listed once; else `UnknownExecutor` naming the first bad one."""
    known = available()
    for name in names:
        if name not in known:
            raise UnknownExecutor(f"unknown executor {name!r} (known: {', '.join(sorted(known)) or 'none'})")
    if len(set(names)) != len(names):
        raise UnknownExecutor(f"an executor is listed twice in {', '.join(names)}")
    if not names:
        raise UnknownExecutor("no executor enabled")
    return list(names)
