"""Find executors through the `trainguard.executors` entry points, and route each action to one.

Executors register exactly like detectors (see pyproject.toml), so a site's
own executor (a different scheduler, a ticketing system) is a package with
an entry point in that group. Each executor class declares the actions it
`handles` (read off the action table's scopes in schemas/actions.py) and
builds itself from an `ExecutorContext` (`from_context`). The enabled
executors are an ordered list (`actions.executors`, `act --executors`):
each action goes to the first one that handles it, so `[kubernetes, local]`
drains through Kubernetes and restarts through the node agents. An action
no enabled executor handles makes its plan fail before it starts (the
runner checks), never a silent skip. Resolution happens only when asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from trainguard.actions.executors.base import Clock, CommandBus, Executor
from trainguard.actions.executors.names import GROUP as GROUP
from trainguard.actions.executors.names import LOCAL as LOCAL
from trainguard.actions.executors.names import UnknownExecutor as UnknownExecutor
from trainguard.actions.executors.names import available as available
from trainguard.actions.executors.names import check_names as check_names
from trainguard.actions.executors.names import expand_legacy as expand_legacy
from trainguard.schemas.actions import ACTIONS

if TYPE_CHECKING:
    from trainguard.actions.settings import ActionSettings

RUNNER_ACTIONS = frozenset(name for name, spec in ACTIONS.items() if spec.scope == "runner")


@dataclass(frozen=True)
class ExecutorContext:
    """What executors build themselves from; each takes only its part."""

    settings: ActionSettings
    clock: Clock
    command_bus: CommandBus | None = None  # the agents' bus; None where nothing may be sent (dry run)


def load(name: str) -> Any:
    """Import and return the executor class registered as `name`.

    An executor class has a `name`, a class attribute `handles` (a frozenset of
    action names), `from_context(ctx)` and `execute(command, *, targets)`.
    """
    for ep in entry_points(group=GROUP):
        if ep.name == name:
            cls = ep.load()
            if not isinstance(getattr(cls, "handles", None), frozenset) or not hasattr(cls, "from_context"):
                raise UnknownExecutor(f"entry point {name!r} ({ep.value}) is not an executor class "
                                      "(needs `handles` and `from_context`)")
            return cls
    raise UnknownExecutor(f"unknown executor {name!r} (known: {', '.join(sorted(available())) or 'none'})")


def build(names: Sequence[str], ctx: ExecutorContext) -> Routes:
    """Build the enabled executors (checked by `Routes`: each must carry out something)."""
    return Routes([load(name).from_context(ctx) for name in check_names(names)])


class Routes:
    """Which enabled executor carries out each action: the first listed that handles it.

    The runner's own actions (swap a standby, escalate, nothing) need no executor.
    """

    def __init__(self, executors: Iterable[Executor]) -> None:
        self.executors = list(executors)
        self._by_action: dict[str, Executor] = {}
        for executor in self.executors:
            for action in executor.handles:
                self._by_action.setdefault(action, executor)
        for executor in self.executors:
            if not any(chosen is executor for chosen in self._by_action.values()):
                raise UnknownExecutor(f"executor {executor.name!r} would carry out nothing: executors listed "
                                      "before it handle all it does (each action goes to the first that handles it)")

    def for_action(self, action: str) -> Executor | None:
        """The executor of `action`, or None if no enabled one handles it."""
        return self._by_action.get(action)

    def unhandled(self, actions: Iterable[str]) -> list[str]:
        """The actions among `actions` no enabled executor (and not the runner) carries out, in order, once."""
        missing = (a for a in actions if a not in RUNNER_ACTIONS and a not in self._by_action)
        return list(dict.fromkeys(missing))

    @property
    def names(self) -> list[str]:
        """The enabled executors' names, in priority order."""
        return [e.name for e in self.executors]

    def describe(self) -> dict[str, Any]:
        """Executor name -> the actions routed to it, and what nothing handles (act prints it at start)."""
        out: dict[str, Any] = {e.name: sorted(a for a, x in self._by_action.items() if x is e) for e in self.executors}
        out["unhandled"] = self.unhandled(ACTIONS)
        return out
