"""A PNG timeline of injected faults and detected incidents, one row per kind.

Faults are drawn as shaded spans from start to end; incidents as markers at
their `detected_at`, green when they match a fault, red when they do not.
Hours are counted from the first event of the recording, so two reports of
the same recording line up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainguard.schemas.kinds import ANOMALY_KINDS


def plot_timeline(path: Path, labels: list[dict[str, Any]], incidents: list[dict[str, Any]],
                  matches: dict[str, str | None], *, t0: float, t1: float, title: str = "") -> None:
    """Write the timeline PNG to `path` (matplotlib, Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    kinds = list(ANOMALY_KINDS)
    row = {k: i for i, k in enumerate(kinds)}
    fig = Figure(figsize=(12, 0.45 * len(kinds) + 1.6))
    ax = fig.add_subplot()
    hours = 3600.0
    for lab in labels:
        y = row.get(lab["kind"])
        if y is not None:
            width = max((lab["end"] - lab["start"]) / hours, 0.002)
            ax.broken_barh([((lab["start"] - t0) / hours, width)], (y - 0.35, 0.7), color="tab:orange", alpha=0.35)
    for matched in (True, False):
        xs = [(i["detected_at"] - t0) / hours for i in incidents if (matches.get(i["id"]) is not None) == matched]
        ys = [row.get(i["kind"], -1) for i in incidents if (matches.get(i["id"]) is not None) == matched]
        ax.scatter(xs, ys, marker="v" if matched else "x", s=40, zorder=3,
                   color="tab:green" if matched else "tab:red",
                   label="incident matching a fault" if matched else "incident matching no fault")
    ax.set_yticks(range(len(kinds)), kinds)
    ax.set_ylim(-0.7, len(kinds) - 0.3)
    ax.set_xlim(0, max((t1 - t0) / hours, 0.01))
    ax.set_xlabel("event time (hours since the first event); shaded: injected faults")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper right", fontsize="small")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
