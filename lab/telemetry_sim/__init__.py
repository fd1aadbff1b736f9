"""The telemetry simulator: scenario YAML in, a recording of the events collectors would publish and its
ground-truth labels out (`trainguard simulate`). Minutes to days of a few jobs, event by event; for months
of a big job priced as ETTR, see `lab.ettr_sim`.

`run_scenario` is the one entry point; everything under it is pure (no I/O
except reading the scenario's trace file), seeded and deterministic.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from trainguard.lab.telemetry_sim.engine import Simulation
from trainguard.lab.telemetry_sim.fleet import FleetMess, idle_hardware, merge
from trainguard.lab.telemetry_sim.plan import build_plan, labels
from trainguard.lab.telemetry_sim.scenario import Scenario, ScenarioError, load_scenario
from trainguard.lab.telemetry_sim.trace import TraceError, trace_faults
from trainguard.schemas.records import Record


def run_scenario(scenario: Scenario) -> tuple[Iterator[Record], list[dict[str, Any]]]:
    """The scenario's records (arrival order, lazily) and its labels.

    Every job is simulated on its own and the streams are merged with the
    idle nodes' hardware, then passed through the fleet's mess (clock skew,
    delivery jitter, jobless hardware samples; see `lab.telemetry_sim.fleet`).
    Raises `ScenarioError` (one line naming the key) for a fault plan that
    cannot be played, and `TraceError` when the trace is missing.
    """
    streams: list[Iterator[Record]] = []
    truth: list[dict[str, Any]] = []
    busy: dict[str, list[tuple[float, float]]] = {}
    for index in range(len(scenario.all_jobs)):
        one = scenario.for_job(index)
        try:
            plan = build_plan(one, trace_faults(one))
        except TraceError:
            raise
        except ValueError as exc:
            raise ScenarioError(f"{scenario.name}: {exc}") from None
        sim = Simulation(one, plan)
        streams.append(sim.events())
        found = labels(plan, one, sim.node_names)
        if index:  # fault ids are numbered per job: name the job so ids stay unique
            for lab in found:
                lab["id"] = lab["id"].replace(f"{scenario.name}-", f"{scenario.name}-{one.job.name}-", 1)
        truth.extend(found)
        for name in sim.node_names:
            busy.setdefault(name, []).append((sim.begin, sim.end))
    names = sorted(busy) + [f"idle-node-{i:03d}" for i in range(scenario.fleet.idle_nodes)]
    if len(streams) > 1 or scenario.fleet.idle_nodes or any(a > scenario.start_ts for w in busy.values()
                                                            for a, _ in w):
        streams.append(idle_hardware(scenario, busy, names))
    truth.sort(key=lambda lab: lab["start"])
    return FleetMess(scenario).apply(merge(streams)), truth


__all__ = ["Scenario", "ScenarioError", "TraceError", "load_scenario", "run_scenario"]
