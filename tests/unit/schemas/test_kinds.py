"""The incident-kind table: one row per kind, and the sets the correlator, act, alerts and backtest read off it."""

from __future__ import annotations

import doctest
import importlib
from typing import get_args

import msgspec
import pytest

from trainguard.detectors.metric_anomaly import Kind
from trainguard.detectors.settings import DEFAULT_TYPES
from trainguard.lab.telemetry_sim.scenario import DRAWN, VARIANTS, FaultKind
from trainguard.schemas import kinds
from trainguard.schemas.kinds import (
    ANOMALY_KINDS,
    CAUSES,
    CRASH_CAUSES,
    EVICTING_KINDS,
    KINDS,
    NODE_LOCAL,
    NOTED,
    SEVERITY,
    SICK_NODE_KINDS,
    SYMPTOMS,
    AnomalyKind,
    IncidentKind,
)
from trainguard.schemas.records import Anomaly


def test_every_kind_has_exactly_one_row_in_the_literals_order() -> None:
    assert list(KINDS) == list(get_args(AnomalyKind))
    assert ANOMALY_KINDS == get_args(IncidentKind)  # the built-in kinds are the incident kinds, in the same order


def test_the_other_literals_are_the_tables() -> None:
    # pydantic (the simulator's scenarios) and the metric-anomaly detector's `kind` need a Literal; it is this one.
    assert get_args(FaultKind) == ANOMALY_KINDS
    assert get_args(Kind) == ANOMALY_KINDS
    assert set(VARIANTS) == set(DRAWN) == set(ANOMALY_KINDS)


def test_the_sets_read_off_the_table_are_the_ones_written_out_before() -> None:
    assert ANOMALY_KINDS == ("hw_fault", "network", "hang", "slowdown", "nan", "loss_spike", "sdc", "user_error")
    assert SEVERITY == {"hw_fault": "critical", "sdc": "critical", "hang": "critical", "network": "warning",
                        "nan": "warning", "loss_spike": "warning", "slowdown": "warning", "user_error": "warning"}
    assert CAUSES == {"hw_fault", "network", "user_error", "nan", "sdc"}
    assert SYMPTOMS == {"hang", "slowdown"}
    assert CRASH_CAUSES == CAUSES | {"hang"}
    assert NODE_LOCAL == {"hw_fault"}
    assert NOTED == {"clock_skew"}
    assert EVICTING_KINDS == {"hw_fault", "network", "hang", "slowdown", "sdc"}
    assert SICK_NODE_KINDS == {"hw_fault", "network", "sdc"}
    assert DEFAULT_TYPES == ("nan", "hw_fault", "network", "hang", "slowdown", "loss_spike", "sdc", "user_error")


def test_no_kind_is_both_cause_and_noted_and_symptoms_are_never_node_local() -> None:
    assert not CAUSES & SYMPTOMS and not (CAUSES | SYMPTOMS) & NOTED
    assert not SYMPTOMS & NODE_LOCAL
    assert NODE_LOCAL <= EVICTING_KINDS  # a node-local fault is evicted per node


def test_records_accept_only_kinds_from_the_table() -> None:
    fields = {"ts": 1.0, "id": "a", "detector": "d", "onset": 1.0}
    for kind in KINDS:
        assert msgspec.convert({**fields, "kind": kind}, Anomaly).kind == kind
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({**fields, "kind": "hw_falt"}, Anomaly)


def test_the_old_names_still_import() -> None:
    from trainguard.actions.alerts import SEVERITY as alerts_severity
    from trainguard.detectors.correlate import CAUSES as correlate_causes
    from trainguard.lab.backtest.scoring import EVICTING_KINDS as scoring_evicting
    from trainguard.schemas import ANOMALY_KINDS as package_kinds
    from trainguard.schemas.records import ANOMALY_KINDS as records_kinds

    assert alerts_severity is SEVERITY and correlate_causes is CAUSES and scoring_evicting is EVICTING_KINDS
    assert package_kinds is records_kinds is kinds.ANOMALY_KINDS


@pytest.mark.parametrize("name", ["trainguard.schemas.bounded", "trainguard.schemas.ids", "trainguard.schemas.node_jobs"])
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0, result


def test_lemon_nodes_are_blamed_by_the_tables_column() -> None:
    """The machine's own faults count against every node they name; network and slowdown only a lone one."""
    from trainguard.actions.lemons import DEFAULT_KINDS, DEFAULT_LOCALISED

    assert (DEFAULT_KINDS, DEFAULT_LOCALISED) == (("hw_fault", "sdc"), ("network", "slowdown"))
    assert not set(DEFAULT_KINDS) & set(DEFAULT_LOCALISED)
