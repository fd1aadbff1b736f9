"""Fault arrivals from the real InfiniteHBD trace, network signatures."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.lab.telemetry_sim import run_scenario
from trainguard.lab.telemetry_sim.scenario import parse_scenario
from trainguard.lab.telemetry_sim.trace import DEFAULT_KINDS_MAP, TraceError, load_trace, map_kind, trace_faults
from trainguard.schemas.records import RdmaSample

ROOT = Path(__file__).resolve().parents[4]
TRACE = ROOT.parent / "shared" / "data" / "infinitehbd"  # ../shared/data/infinitehbd, as in CI


def test_the_real_trace_loads_in_time_order() -> None:
    starts = load_trace(TRACE)
    assert len(starts) == 584
    assert all(a["event_time"] <= b["event_time"] for a, b in zip(starts, starts[1:]))


def test_trace_faults_land_on_the_fleet_inside_the_scenario() -> None:
    sc = parse_scenario({"name": "t", "duration_s": 7200, "job": {"nodes": 8},
                         "faults_from_trace": {"path": str(TRACE), "time_scale": 20}})
    specs = trace_faults(sc)
    assert specs and all(0 <= s.at_s < 7200 and s.node is not None and s.node < 8 for s in specs)
    assert {s.kind for s in specs} <= {"hw_fault", "network", "slowdown", "sdc"}
    _, labels = run_scenario(sc)
    assert labels and len(labels) <= len(specs)  # overlapping arrivals are dropped, never merged
    assert all(a["end"] < b["start"] for a, b in zip(labels, labels[1:]))


def test_missing_trace_fails_with_a_clear_message(tmp_path: Path) -> None:
    sc = parse_scenario({"name": "t", "duration_s": 60, "faults_from_trace": {"path": str(tmp_path / "none")}})
    with pytest.raises(TraceError, match="faults_from_trace.path: InfiniteHBD trace not found"):
        run_scenario(sc)


def test_kinds_map_overrides_and_rejects_unknown_kinds() -> None:
    assert map_kind({"Class": "Fan", "Desc": "Speed Critical (Sensor)"}, {"Fan": "slowdown/thermal"}) == (
        "slowdown", "thermal")
    assert map_kind({"Class": "GPU", "Desc": "GPU Lost"}, {**DEFAULT_KINDS_MAP, "GPU Lost": "ignore"}) is None
    with pytest.raises(TraceError, match="kinds_map"):
        map_kind({"Class": "GPU", "Desc": "GPU Lost"}, {"GPU Lost": "meltdown"})


def test_port_down_and_error_burst_signatures() -> None:
    sc = parse_scenario({"name": "n", "duration_s": 1500, "seed": 2, "job": {"nodes": 2, "tp": 8},
                         "faults": [{"kind": "network", "at_s": 300, "node": 1, "gpu": 2, "variant": "port_down"},
                                    {"kind": "network", "at_s": 900, "node": 0, "variant": "error_burst"}]})
    events, labels = run_scenario(sc)
    rdma = [r for r in events if isinstance(r, RdmaSample)]
    t0 = sc.start_ts
    down = [p for r in rdma if r.node == "gpu-node-001" and 300 <= r.ts - t0 < 600 for p in r.ports
            if p.device == "mlx5_2"]
    assert down and all(p.state == "DOWN" and p.link_downed == 1 for p in down)
    def errors(lo: float, hi: float) -> int:
        window = [r for r in rdma if r.node == "gpu-node-000" and lo <= r.ts - t0 < hi]
        return sum(p.symbol_errors for p in window[-1].ports) - sum(p.symbol_errors for p in window[0].ports)
    assert errors(900, 990) > 100 > errors(1100, 1490)
    assert [(lab["kind"], lab["variant"], lab["nodes"]) for lab in labels] == [
        ("network", "port_down", ["gpu-node-001"]), ("network", "error_burst", ["gpu-node-000"])]
