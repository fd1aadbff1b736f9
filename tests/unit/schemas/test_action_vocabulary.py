"""The action vocabulary table: one row per action name, and the sets the runner, executors and agents use."""

from __future__ import annotations

from typing import get_args

import msgspec
import pytest

from trainguard.schemas.action_params import ActionParams, NoParams, Removal
from trainguard.schemas.actions import (
    ACTIONS,
    AGENT_ACTIONS,
    AGENT_TRANSLATION,
    AGENT_VERBS,
    CLUSTER_ACTIONS,
    DIAGNOSES,
    REMOVES_NODE,
    RESTARTS_JOB,
    STOP_PLAN_ON_FAILURE,
    ActionName,
    agent_params,
    params_problem,
)
from trainguard.schemas.records import PlannedAction


def test_every_action_name_has_exactly_one_row() -> None:
    assert list(ACTIONS) == list(get_args(ActionName))


def test_the_sets_read_off_the_table() -> None:
    assert CLUSTER_ACTIONS == {"evict_node", "cordon_node", "uncordon_node"}
    assert AGENT_ACTIONS == {"restart_from_checkpoint", "hot_update", "rollback_code", "dump_stacks", "stop",
                             "self_check", "replay_regroup", "retry"}
    assert AGENT_VERBS == AGENT_ACTIONS - {"retry"}  # retry reaches the agents as a restart
    assert AGENT_TRANSLATION == {"evict_node": "stop", "cordon_node": "stop", "retry": "restart_from_checkpoint"}
    assert STOP_PLAN_ON_FAILURE == {"evict_node", "restart_from_checkpoint", "rollback_code", "hot_update", "retry"}
    assert RESTARTS_JOB == {"restart_from_checkpoint", "retry", "rollback_code", "hot_update"}
    assert REMOVES_NODE == {"evict_node", "cordon_node"}
    assert DIAGNOSES == {"self_check", "replay_regroup"}


def test_every_agent_verb_is_itself_an_agent_action() -> None:
    assert AGENT_VERBS <= AGENT_ACTIONS


def test_records_accept_only_names_from_the_table() -> None:
    assert msgspec.convert({"action": "evict_node"}, PlannedAction).action == "evict_node"
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"action": "reboot_everything"}, PlannedAction)


def test_every_row_names_a_params_struct_of_the_wire_union() -> None:
    """Each action's parameters default-construct and round-trip through the tagged union with their tag."""
    union = set(get_args(ActionParams))
    for name, spec in ACTIONS.items():
        assert spec.params in union, name
        step = PlannedAction(action=name)
        wire = msgspec.json.encode(step.params)
        assert msgspec.json.decode(wire, type=ActionParams) == step.params == spec.params()


def test_an_agent_verb_gets_parameters_it_takes() -> None:
    """Translated for the agents, an eviction is a stop: its Slurm job id stays behind, its reason goes."""
    for name in AGENT_TRANSLATION:
        verb = ACTIONS[name].agent_verb
        sent = agent_params(name, ACTIONS[name].params(reason="why"))
        assert params_problem(verb, sent) == "" and sent.reason == "why"  # type: ignore[arg-type]
    assert agent_params("evict_node", Removal(slurm_job_id="42")) == NoParams()

