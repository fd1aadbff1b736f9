"""Present a simulation: a rich table for people, a JSON document for tools."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.console import Console
from rich.table import Table

from trainguard.lab.ettr_sim.costs import PHASES, Loss
from trainguard.lab.ettr_sim.engine import PolicyResult, SimResult
from trainguard.lab.ettr_sim.params import as_dict


def to_json(result: SimResult) -> dict[str, Any]:
    """Everything needed to check or re-plot the run, as plain data."""
    kinds = Counter(a.kind for a in result.arrivals)
    return {
        "seed": result.seed,
        "job": {"nodes": result.params.job.nodes, "gpus": result.params.job.gpus, "days": result.params.job.days},
        "trace_faults_per_node_day": result.trace_rate,
        "incidents": len(result.arrivals),
        "incidents_by_kind": dict(sorted(kinds.items())),
        "policies": {p.name: _policy_json(p) for p in (result.trainguard, result.baseline)},
        "params": as_dict(result.params),
    }


def _policy_json(p: PolicyResult) -> dict[str, Any]:
    return {
        "ettr": round(p.ettr, 6),
        "incidents_handled": p.incidents,
        "unproductive_hours": {k: round(v / 3600, 3) for k, v in p.loss.as_dict().items()},
        "unproductive_hours_total": round(p.loss.total_s / 3600, 3),
        "checkpoint_overhead_hours": round(p.overhead_s / 3600, 3),
        "requeues_for_lack_of_standby": p.requeues,
        "evicted_nodes": p.evicted_nodes,
        "over_evicted_nodes": p.over_evicted_nodes,
        "over_evicted_per_day": round(p.over_evicted_per_day, 3),
        "stop_time_diagnoses": p.diagnoses,
        "by_kind_hours": {k: round(v.total_s / 3600, 3) for k, v in sorted(p.by_kind.items())},
    }


def print_report(result: SimResult, console: Console | None = None) -> None:
    """Two tables: ETTR with the unproductive-time breakdown, then the loss per incident kind."""
    console = console or Console()
    job = result.params.job
    console.print(
        f"[bold]ETTR simulation[/]: {job.gpus:,} GPUs ({job.nodes:,} nodes x {job.gpus_per_node}) for "
        f"{job.days:g} days, seed {result.seed}; {len(result.arrivals):,} incidents resampled from the trace "
        f"({result.trace_rate:.5f} faults per node-day)"
    )
    console.print(_summary_table(result))
    tg, c = result.trainguard, result.params.trainguard
    console.print(f"trainguard: {tg.evicted_nodes:,} nodes evicted, {tg.over_evicted_nodes:,} of them healthy "
                  f"({tg.over_evicted_per_day:.2f} per day, groups of {c.over_evict_nodes}), "
                  f"{tg.diagnoses:,} stop-time diagnoses, {tg.requeues:,} requeues for lack of a standby "
                  f"(pool {c.standby_pool:,})")
    console.print(_kind_table(result))


def _summary_table(result: SimResult) -> Table:
    table = Table(title="ETTR and unproductive time (hours)")
    table.add_column("policy")
    table.add_column("ETTR", justify="right")
    for phase in PHASES:
        table.add_column(phase, justify="right")
    table.add_column("ckpt overhead", justify="right")
    table.add_column("total", justify="right")
    for p in (result.trainguard, result.baseline):
        table.add_row(p.name, f"{p.ettr:.2%}", *(_h(v) for v in p.loss.as_dict().values()), _h(p.overhead_s),
                      _h(p.loss.total_s + p.overhead_s))
    return table


def _kind_table(result: SimResult) -> Table:
    counts = Counter(a.kind for a in result.arrivals)
    table = Table(title="Unproductive hours by incident kind")
    table.add_column("kind")
    table.add_column("incidents", justify="right")
    table.add_column("trainguard", justify="right")
    table.add_column("baseline", justify="right")
    for kind, n in counts.most_common():
        ours = result.trainguard.by_kind.get(kind, Loss())
        theirs = result.baseline.by_kind.get(kind, Loss())
        table.add_row(kind, str(n), _h(ours.total_s), _h(theirs.total_s))
    return table


def _h(seconds: float) -> str:
    return f"{seconds / 3600:,.1f}"
