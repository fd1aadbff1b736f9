"""Present a standby-pool sweep: rich tables, a Markdown table for the docs, JSON, and a plot."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from trainguard.lab.ettr_sim.sweep import SweepPoint, best


def _by_size(points: Sequence[SweepPoint]) -> dict[int, list[SweepPoint]]:
    out: dict[int, list[SweepPoint]] = {}
    for p in points:
        out.setdefault(p.nodes, []).append(p)
    return out


def _cell(p: SweepPoint, sep: str = " · ") -> str:
    return f"{p.ettr:.2%}{sep}{p.requeues:.1f}{sep}{p.over_evicted_per_day:.1f}"


def _pct(pool: int, nodes: int) -> str:
    return f"{100 * pool / nodes:.2f}".rstrip("0").rstrip(".") + "%"


def _grid(points: list[SweepPoint]) -> tuple[list[int], list[int], dict[tuple[int, int], SweepPoint]]:
    pools = sorted({p.pool for p in points})
    groups = sorted({p.group for p in points})
    return pools, groups, {(p.pool, p.group): p for p in points}


def _title(p: SweepPoint) -> str:
    return (f"{p.gpus:,} GPUs ({p.nodes:,} nodes), mean of {p.seeds} seeds, {p.incidents:,.0f} incidents per run: "
            "ETTR · requeues for lack of a standby per run · healthy nodes over-evicted per day")


def print_sweep(points: Sequence[SweepPoint], console: Console | None = None) -> None:
    """One table per job size: pool down, over-eviction group across; then the best cell."""
    console = console or Console()
    for nodes, cells in _by_size(points).items():
        pools, groups, at = _grid(cells)
        table = Table(title=_title(cells[0]))
        table.add_column("standby pool", justify="right")
        for g in groups:
            table.add_column("diagnose" if g == 1 else f"group of {g}", justify="right")
        for pool in pools:
            table.add_row(f"{pool:,} ({_pct(pool, nodes)})", *(_cell(at[pool, g], "\n") for g in groups))
        console.print(table)
        top = best(cells, nodes)
        console.print(f"best goodput per provisioned GPU at {cells[0].gpus:,} GPUs: pool {top.pool:,}, "
                      f"{'diagnose' if top.group == 1 else f'group of {top.group}'}: ETTR {top.ettr:.2%}, "
                      f"goodput {top.goodput:.2%}")


def sweep_markdown(points: Sequence[SweepPoint]) -> str:
    """The same tables in Markdown (docs/ettr-simulation.md quotes them)."""
    lines: list[str] = []
    for nodes, cells in _by_size(points).items():
        pools, groups, at = _grid(cells)
        lines += [f"**{_title(cells[0])}**", "",
                  "| standby pool | " + " | ".join("diagnose" if g == 1 else f"group of {g}" for g in groups) + " |",
                  "|---:|" + "---:|" * len(groups)]
        lines += [f"| {pool:,} ({_pct(pool, nodes)}) | " + " | ".join(_cell(at[pool, g]) for g in groups) + " |"
                  for pool in pools]
        lines.append("")
    return "\n".join(lines)


def sweep_json(points: Sequence[SweepPoint]) -> list[dict[str, Any]]:
    """Every cell as plain data, with its derived figures."""
    return [{**asdict(p), "pool_pct": round(p.pool_pct, 4), "goodput": round(p.goodput, 6)} for p in points]


def plot_sweep(points: Sequence[SweepPoint], path: Path) -> None:
    """ETTR, requeues and over-eviction against the pool size, one column per job size, one line per group."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    sizes = _by_size(points)
    fig = Figure(figsize=(5.2 * len(sizes), 9.0))
    axes = fig.subplots(3, len(sizes), squeeze=False)
    rows = (("ETTR (%)", lambda p: 100 * p.ettr), ("requeues per run", lambda p: p.requeues),
            ("healthy nodes over-evicted / day", lambda p: p.over_evicted_per_day))
    for col, (nodes, cells) in enumerate(sizes.items()):
        pools, groups, at = _grid(cells)
        for row, (label, value) in enumerate(rows):
            ax = axes[row][col]
            for g in groups:
                ax.plot([100 * p / nodes for p in pools], [value(at[p, g]) for p in pools], marker="o",
                        label="diagnose" if g == 1 else f"group of {g}")
            ax.set_ylabel(label)
            if row == 1:
                ax.set_yscale("symlog", linthresh=1.0)  # thousands at an empty pool, a handful near the knee
            ax.grid(alpha=0.3)
            if row == 0:
                ax.set_title(f"{cells[0].gpus:,} GPUs ({nodes:,} nodes)")
            if row == 2:
                ax.set_xlabel("standby pool (% of the job's nodes)")
    axes[0][0].legend(fontsize="small", title="over-eviction")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
