"""The fleet simulator: scenario YAML in, a recording and its ground-truth labels out.

`run_scenario` is the one entry point; everything under it is pure (no I/O
except reading the scenario's trace file), seeded and deterministic.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from schemas.records import Record
from trainguard.simulate.engine import Simulation
from trainguard.simulate.plan import build_plan, labels
from trainguard.simulate.scenario import Scenario, ScenarioError, load_scenario
from trainguard.simulate.trace import TraceError, trace_faults


def run_scenario(scenario: Scenario) -> tuple[Iterator[Record], list[dict[str, Any]]]:
    """The scenario's records (event-time order, lazily) and its labels.

    Raises `ScenarioError` (one line naming the key) for a fault plan that
    cannot be played, and `TraceError` when the trace is missing.
    """
    try:
        plan = build_plan(scenario, trace_faults(scenario))
    except TraceError:
        raise
    except ValueError as exc:
        raise ScenarioError(f"{scenario.name}: {exc}") from None
    sim = Simulation(scenario, plan)
    return sim.events(), labels(plan, scenario, sim.node_names)


__all__ = ["Scenario", "ScenarioError", "TraceError", "load_scenario", "run_scenario"]
