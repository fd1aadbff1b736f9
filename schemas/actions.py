"""The action vocabulary: every action a decision can plan, and how each one is carried out.

One table instead of sets scattered over the engine, runner, executors and the
node agent, so adding an action means adding one row here:

* `scope` says who acts: the cluster scheduler (`cluster`: Kubernetes, Slurm),
  the `trainguard run` agents (`agent`), or the plan runner itself (`runner`:
  swapping in a standby, escalating, doing nothing).
* `stops_plan_on_failure`: a failed or refused step of this kind ends the plan
  (a restart after a failed eviction would land on the same bad machine).
* `agent_verb`: what an agent is asked to do when the local executor carries
  the action out (`evict_node` there means stopping the node's process);
  empty when no agent acts.
* `restarts_job`: the step restarts training, so it carries the evicted nodes,
  standby swaps and a new attempt number.
* `removes_node`: the step takes machines out of the job, so the safety rails
  (cool-down, circuit breaker) must allow it and record it.
* `diagnoses`: a stop-time diagnosis; act fans it out, one command to each
  named machine's agent, which runs only that machine's part
  (`actions.selfcheck.fanout`), and ETTR counts its time as localisation.
* `params`: the struct of `schemas.action_params` its steps and commands
  carry (`params_problem` checks it; a fanned-out diagnosis carries a
  `MachineCheck`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trainguard.schemas.action_params import (
    DumpStacks,
    MachineCheck,
    NoParams,
    Params,
    Removal,
    Replay,
    Restart,
    SelfCheck,
)

ActionName = Literal[
    "evict_node",
    "cordon_node",
    "uncordon_node",
    "swap_standby",
    "restart_from_checkpoint",
    "hot_update",
    "rollback_code",
    "retry",
    "dump_stacks",
    "self_check",
    "replay_regroup",
    "stop",
    "escalate",
    "none",
]
Scope = Literal["cluster", "agent", "runner"]


@dataclass(frozen=True)
class ActionSpec:
    """One row of the vocabulary (see the module docstring for each column)."""

    scope: Scope
    stops_plan_on_failure: bool = False
    agent_verb: str = ""
    restarts_job: bool = False
    removes_node: bool = False
    diagnoses: bool = False
    params: type[Params] = NoParams


ACTIONS: dict[ActionName, ActionSpec] = {
    "evict_node": ActionSpec("cluster", stops_plan_on_failure=True, agent_verb="stop", removes_node=True,
                             params=Removal),
    "cordon_node": ActionSpec("cluster", agent_verb="stop", removes_node=True, params=Removal),
    "uncordon_node": ActionSpec("cluster"),
    "swap_standby": ActionSpec("runner"),
    "restart_from_checkpoint": ActionSpec("agent", stops_plan_on_failure=True, agent_verb="restart_from_checkpoint",
                                          restarts_job=True, params=Restart),
    "hot_update": ActionSpec("agent", stops_plan_on_failure=True, agent_verb="hot_update", restarts_job=True,
                             params=Restart),
    "rollback_code": ActionSpec("agent", stops_plan_on_failure=True, agent_verb="rollback_code", restarts_job=True,
                                params=Restart),
    "retry": ActionSpec("agent", stops_plan_on_failure=True, agent_verb="restart_from_checkpoint", restarts_job=True,
                        params=Restart),
    "dump_stacks": ActionSpec("agent", agent_verb="dump_stacks", params=DumpStacks),
    "self_check": ActionSpec("agent", agent_verb="self_check", diagnoses=True, params=SelfCheck),
    "replay_regroup": ActionSpec("agent", agent_verb="replay_regroup", diagnoses=True, params=Replay),
    "stop": ActionSpec("agent", agent_verb="stop"),
    "escalate": ActionSpec("runner"),
    "none": ActionSpec("runner"),
}

CLUSTER_ACTIONS = frozenset(name for name, spec in ACTIONS.items() if spec.scope == "cluster")
RUNNER_ACTIONS = frozenset(name for name, spec in ACTIONS.items() if spec.scope == "runner")
AGENT_ACTIONS = frozenset(name for name, spec in ACTIONS.items() if spec.scope == "agent")
STOP_PLAN_ON_FAILURE = frozenset(name for name, spec in ACTIONS.items() if spec.stops_plan_on_failure)
RESTARTS_JOB = frozenset(name for name, spec in ACTIONS.items() if spec.restarts_job)
REMOVES_NODE = frozenset(name for name, spec in ACTIONS.items() if spec.removes_node)
DIAGNOSES = frozenset(name for name, spec in ACTIONS.items() if spec.diagnoses)
# What the node agents can carry out (cluster actions as well: evicting = stopping the node's process).
AGENT_EXECUTABLE = frozenset(name for name, spec in ACTIONS.items() if spec.agent_verb)
# What the agents themselves execute, and how the local executor renames an action for them.
AGENT_VERBS = frozenset(spec.agent_verb for spec in ACTIONS.values() if spec.agent_verb)
AGENT_TRANSLATION = {name: spec.agent_verb for name, spec in ACTIONS.items()
                     if spec.agent_verb and spec.agent_verb != name}


def params_problem(action: ActionName, params: Params) -> str:
    """Why `params` cannot go with `action` ("" when they can): the table's struct, or a machine's check part.

    >>> params_problem("evict_node", Removal(reason="xid"))
    ''
    >>> params_problem("evict_node", Restart(step=3))
    'evict_node takes removal parameters, not restart'
    """
    spec = ACTIONS[action]
    if isinstance(params, spec.params) or (spec.diagnoses and isinstance(params, MachineCheck)):
        return ""
    return f"{action} takes {_tag(spec.params)} parameters, not {_tag(type(params))}"


def with_defaults(action: ActionName, params: Params) -> Params:
    """`params` as `action` takes them: a step written without any gets its struct's defaults (and the reason)."""
    wanted = ACTIONS[action].params
    if type(params) is NoParams and wanted is not NoParams:
        return wanted(reason=params.reason)
    return params


def agent_params(action: ActionName, params: Params) -> Params:
    """`params` as the agent's verb for `action` takes them (an eviction is a stop: only its reason goes).

    >>> agent_params("evict_node", Removal(reason="xid 79", slurm_job_id="42"))
    NoParams(reason='xid 79')
    """
    verb: ActionName = ACTIONS[action].agent_verb  # type: ignore[assignment]  # every verb is an action name
    return params if not params_problem(verb, params) else with_defaults(verb, NoParams(reason=params.reason))


def _tag(cls: type[Params]) -> str:
    return str(cls.__struct_config__.tag)
