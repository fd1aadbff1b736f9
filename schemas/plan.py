"""A decision's plan: its steps, and the typed references one step makes to earlier ones.

A plan is not always a straight line. "Evict only if the confirming
self-check failed", "evict whom the self-check named", "evict the machine
both replay phases name, else the one the checksum vote named": these used
to ride in a step's parameters under magic keys that the engine wrote and
the runner popped, so a misspelt key was silently an unconditional step.
Here they are fields with types: a misspelt field, a wrong type or a
reference to a later step fails when the record is built or decoded, and the
decision record shows each reference explicitly. `params` is what the
executor or agent is sent: the action's struct of `schemas.action_params`
(a reference written there is an unknown field, refused).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from trainguard.schemas.action_params import ActionParams, NoParams
from trainguard.schemas.actions import ActionName, params_problem, with_defaults


class StepCondition(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True, gc=False):
    """Run the step only if step `step` of the same plan ended with `status` (else it is skipped)."""

    step: int
    status: Literal["failed"] = "failed"


class CulpritsOf(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True, gc=False,
                 tag="culprits", tag_field="kind"):
    """The step acts on the machines diagnosis step `step` named (its result's `culprits`).

    Naming none skips the step: there is nothing to evict.
    """

    step: int


class ReplayCulprit(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True, gc=False,
                    tag="replay", tag_field="kind"):
    """The step acts on the one machine in a failing group of both replay phases (`phases`: their steps).

    When the replay names no machine (a transient flip does not reproduce),
    `fallback_nodes` (an unambiguous checksum vote) are used; none skips the step.
    """

    phases: tuple[int, int]
    fallback_nodes: tuple[str, ...] = ()


StepRef = CulpritsOf | ReplayCulprit


class PlannedAction(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True, gc=False,
                    omit_defaults=True):
    """One step of a decision's plan.

    `nodes` are the step's machines unless `targets_from` says whose result
    names them; `when` makes the step conditional; `params` go to the executor
    (the action's struct; none written means its defaults). Defaults are left
    out of the JSON.
    """

    action: ActionName
    nodes: list[str] = []
    ranks: list[int] = []
    params: ActionParams = NoParams()
    when: StepCondition | None = None
    targets_from: StepRef | None = None

    def __post_init__(self) -> None:
        msgspec.structs.force_setattr(self, "params", with_defaults(self.action, self.params))
        if problem := params_problem(self.action, self.params):
            raise ValueError(problem)

    def refers_to(self) -> list[int]:
        """The earlier steps this one depends on."""
        out = [self.when.step] if self.when is not None else []
        if isinstance(self.targets_from, CulpritsOf):
            out.append(self.targets_from.step)
        elif isinstance(self.targets_from, ReplayCulprit):
            out.extend(self.targets_from.phases)
        return out


def check_plan(plan: list[PlannedAction]) -> None:
    """Raise ValueError unless every reference points at an earlier step (replays at `replay_regroup` ones).

    >>> check_plan([PlannedAction(action="self_check"), PlannedAction(action="evict_node", when=StepCondition(step=0))])
    >>> check_plan([PlannedAction(action="evict_node", when=StepCondition(step=0))])
    Traceback (most recent call last):
    ...
    ValueError: plan[0] (evict_node) refers to step 0, which is not an earlier step
    """
    for idx, step in enumerate(plan):
        for ref in step.refers_to():
            if not 0 <= ref < idx:
                raise ValueError(f"plan[{idx}] ({step.action}) refers to step {ref}, which is not an earlier step")
        if isinstance(step.targets_from, ReplayCulprit):
            for phase in step.targets_from.phases:
                if plan[phase].action != "replay_regroup":
                    raise ValueError(f"plan[{idx}] ({step.action}) reads replay phase {phase}, "
                                     f"a {plan[phase].action} step")
