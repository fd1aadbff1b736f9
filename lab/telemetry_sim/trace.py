"""Fault arrivals drawn from the real InfiniteHBD trace (StepFun, Apache-2.0).

The trace lists 584 faults on 400 GPU servers over 348 days, each with a
node, a start and end time (in days) and a Level/Class/Desc type. We keep
its *arrival process*: which nodes fail, when, how often the same node
fails again, and what kind of fault it is. Trace days are compressed by
`time_scale` (simulated seconds per trace day), the first trace nodes to
fail are mapped onto the simulated nodes in order, and each fault's Desc
(or, failing that, its Class) is mapped to one of our kinds. Faults the
simulated job would not notice (fans, power-supply redundancy, unknown
errors) are ignored by default rather than invented into something else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainguard.lab.telemetry_sim.scenario import VARIANTS, FaultSpec, Scenario

TRACE_FILE = "fault_trace.json"

# Desc or Class -> "kind/variant" or "ignore". Desc entries win over Class entries.
DEFAULT_KINDS_MAP: dict[str, str] = {
    "GPU DBE(Double Bit ECC) > Threshold": "hw_fault/dbe",
    "GPU xid Error": "hw_fault/xid",
    "GPU Lost": "hw_fault/lost",
    "GPU device not found": "hw_fault/lost",
    "GPU device unknow error": "hw_fault/xid",
    "nvidia-smi Timeout": "hw_fault/lost",
    "GPU P2P Bandwidth Low": "hw_fault/nvlink",
    "GPU Temperature High": "slowdown/thermal",
    "GPU PCI link width low": "slowdown/silent",
    "Silent Data Corruption": "sdc",
    "Link Down": "network/port_down",
    "NIC Lost": "network/port_down",
    "NIC Link Speed low": "network/error_burst",
    "Rnic Gid Error": "network/error_burst",
    "Parameter Plane Cable": "network/port_down",
    "NIC": "network/error_burst",
}


class TraceError(ValueError):
    """The trace is missing or malformed; the message says where and what."""


def load_trace(path: Path | str) -> list[dict[str, Any]]:
    """The trace's fault_start events, oldest first.

    `path` is the trace directory (or the JSON file itself).
    """
    path = Path(path)
    file = path / TRACE_FILE if path.is_dir() else path
    if not file.is_file():
        raise TraceError(f"faults_from_trace.path: InfiniteHBD trace not found at {file} "
                         f"(in CI it lives at ../shared/data/infinitehbd relative to the repository root)")
    try:
        events = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise TraceError(f"{file}: not valid JSON: {exc}") from None
    try:
        starts = [e for e in events if e["event_type"] == "fault_start"]
        starts.sort(key=lambda e: float(e["event_time"]))
        for e in starts:
            e["fault_type"]["Desc"], e["fault_type"]["Class"], e["node_id"]  # noqa: B018 - shape check
    except (KeyError, TypeError) as exc:
        raise TraceError(f"{file}: unexpected event shape (missing {exc})") from None
    return starts


def map_kind(fault_type: dict[str, str], kinds_map: dict[str, str]) -> tuple[str, str | None] | None:
    """Our (kind, variant) for a trace fault type, or None to ignore it.

    >>> map_kind({"Class": "GPU", "Desc": "GPU Lost"}, DEFAULT_KINDS_MAP)
    ('hw_fault', 'lost')
    >>> map_kind({"Class": "Fan", "Desc": "Speed Critical (Sensor)"}, DEFAULT_KINDS_MAP) is None
    True
    """
    target = kinds_map.get(fault_type.get("Desc", "")) or kinds_map.get(fault_type.get("Class", ""))
    if not target or target == "ignore":
        return None
    kind, _, variant = target.partition("/")
    if kind not in VARIANTS or (variant and variant not in VARIANTS[kind]):
        raise TraceError(f"faults_from_trace.kinds_map: {target!r} is not a kind[/variant] "
                         f"(kinds: {', '.join(VARIANTS)})")
    return kind, variant or None


def trace_faults(scenario: Scenario) -> list[FaultSpec]:
    """The scenario's trace-drawn faults, as fault specs on its own nodes."""
    spec = scenario.faults_from_trace
    if spec is None:
        return []
    kinds_map = {**DEFAULT_KINDS_MAP, **(spec.kinds_map or {})}
    nodes: dict[str, int] = {}
    out: list[FaultSpec] = []
    for event in load_trace(spec.path):
        day = float(event["event_time"])
        if day < spec.start_day:
            continue
        at_s = (day - spec.start_day) * spec.time_scale
        if at_s >= scenario.duration_s or len(out) >= spec.max_faults:
            break
        mapped = map_kind(event["fault_type"], kinds_map)
        node_id = event["node_id"]
        if node_id not in nodes:
            if len(nodes) >= scenario.job.nodes:
                continue  # this trace server has no counterpart in the simulated fleet
            nodes[node_id] = len(nodes)
        if mapped is None:
            continue
        kind, variant = mapped
        out.append(FaultSpec.model_validate({"kind": kind, "at_s": at_s, "variant": variant, "node": nodes[node_id]}))
    return out
