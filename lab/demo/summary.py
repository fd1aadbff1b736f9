"""The demo's ending: a per-fault table, the job's ETTR, and a timeline PNG."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from trainguard.actions.ettr import EttrAccount, EttrReport
from trainguard.lab.demo.runner import DemoOutcome


def ettr_of(outcome: DemoOutcome, job: str) -> EttrReport:
    """The job's ETTR computed from what the pipeline recorded."""
    account = EttrAccount()
    for record in sorted([*outcome.steps, *outcome.incidents, *outcome.results], key=lambda r: r.ts):
        account.observe(record)
    return account.report(job)


def print_summary(outcome: DemoOutcome, job: str, console: Console) -> EttrReport:
    """Render the per-fault table and the ETTR breakdown."""
    table = Table(title="faults injected and handled")
    for col in ("fault", "incident", "latency", "rule", "from step", "ok"):
        table.add_column(col)
    for f in outcome.faults:
        table.add_row(
            f"{f.step.kind}" + (f" @{f.step.node}" if f.step.node else ""),
            f.incident.kind if f.incident else "[red]missed[/]",
            f"{f.latency_s:.1f}s" if f.latency_s is not None else "-",
            (f.decision.rule.split(".", 1)[-1] if f.decision else "-"),
            str(f.resumed_from) if f.resumed_from is not None else "-",
            "[green]yes[/]" if f.ok else "[red]no[/]",
        )
    console.print(table)
    report = ettr_of(outcome, job)
    parts = ", ".join(f"{k} {v:.1f}s" for k, v in report.unproductive_s.items())
    console.print(f"[bold]ETTR[/] {report.ettr:.1%} over {report.wall_s:.0f}s of wall-clock "
                  f"({report.productive_s:.0f}s productive; unproductive: {parts})")
    console.print(f"final step {outcome.final_step}, final loss {outcome.final_loss}")
    return report


def plot_timeline(outcome: DemoOutcome, path: Path) -> Path:
    """Step progress per attempt, with fault injections and detections marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = outcome.started_at
    fig, ax = plt.subplots(figsize=(11, 4.5))
    rank0 = sorted((s for s in outcome.steps if s.rank == 0), key=lambda s: s.ts)
    for attempt in sorted({s.attempt for s in rank0}):
        pts = [s for s in rank0 if s.attempt == attempt]
        ax.plot([s.ts - t0 for s in pts], [s.step for s in pts], ".", ms=2, label=f"attempt {attempt}")
    for f in outcome.faults:
        ax.axvline(f.injected_at - t0, color="red", lw=0.8)
        ax.annotate(f.step.kind, (f.injected_at - t0, ax.get_ylim()[1]), rotation=90, va="top", fontsize=7,
                    color="red")
        if f.incident is not None:
            ax.axvline(f.incident.detected_at - t0, color="orange", lw=0.8, ls="--")
    ax.set_xlabel("seconds since start (red: fault injected, orange: incident)")
    ax.set_ylabel("step (rank 0)")
    ax.set_title("trainguard demo: training progress through injected faults")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
