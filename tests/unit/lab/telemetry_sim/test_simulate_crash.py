"""The simulator's whole-job crashes: an application CUDA error on every node, a silent death at start-up."""

from __future__ import annotations

from typing import Any

from trainguard.lab.telemetry_sim import run_scenario
from trainguard.lab.telemetry_sim.scenario import parse_scenario
from trainguard.schemas.records import LogEvent, NodeGpuSample, Record

T0 = 1_767_225_600.0


def simulate(fault: dict[str, Any]) -> tuple[list[Record], list[dict[str, Any]]]:
    data: dict[str, Any] = {"name": "t", "seed": 9, "duration_s": 1500,
                            "job": {"nodes": 4, "gpus_per_node": 4, "tp": 2, "pp": 2, "step_time_s": 5.0},
                            "background": {"benign_xids_per_node_h": 0.0}, "faults": [fault]}
    events, labels = run_scenario(parse_scenario(data))
    return list(events), labels


def test_an_application_cuda_error_puts_a_benign_xid_on_every_node_within_a_second_and_reads_as_nccl() -> None:
    events, [label] = simulate({"kind": "user_error", "at_s": 300, "variant": "app_xid"})
    xids = [(s.node, x) for s in events if isinstance(s, NodeGpuSample) for x in s.xids]
    assert sorted({node for node, _ in xids}) == [f"gpu-node-{i:03d}" for i in range(4)]
    assert {x.code for _, x in xids} <= {13, 31, 43} and len({x.code for _, x in xids}) == 1
    times = [x.ts for _, x in xids]
    assert T0 + 300 <= min(times) and max(times) - min(times) < 1.0
    aborts = [e for e in events if isinstance(e, LogEvent) and "watchdog thread terminated" in e.message]
    assert len(aborts) == 4 and all("CUDA error" in e.message for e in aborts)
    assert (label["kind"], label["variant"], label["nodes"]) == ("user_error", "app_xid", [])


def test_a_silent_start_up_death_comes_after_a_code_change_on_every_node_with_only_torchruns_summary() -> None:
    events, [label] = simulate({"kind": "user_error", "at_s": 300, "variant": "silent_startup"})
    exits = [e for e in events if isinstance(e, LogEvent) and e.category == "exit" and e.exit_code == 1]
    assert len({e.node for e in exits}) == 4
    assert all("before its first step, saying nothing" in e.message for e in exits)
    assert all(e.ts > T0 + 300 for e in exits)
    summaries = [e for e in events if isinstance(e, LogEvent) and "ChildFailedError" in e.message]
    assert len(summaries) == 4 and not any("Traceback" in e.message for e in summaries)
    assert label["variant"] == "silent_startup"


def test_a_sigkill_on_one_node_leaves_only_that_nodes_exit_event_no_traceback_no_message() -> None:
    events, [label] = simulate({"kind": "user_error", "at_s": 300, "variant": "sigkill", "node": 2})
    exits = [e for e in events if isinstance(e, LogEvent) and e.category == "exit" and e.exit_code]
    assert [e.node for e in exits] == ["gpu-node-002"] and exits[0].exit_code in (-9, 137)
    assert T0 + 300 < exits[0].ts < T0 + 304
    late = [e for e in events if isinstance(e, LogEvent) and e.ts >= T0 + 300 and e.level == "ERROR"]
    assert late == exits  # nothing else says why the job stopped
    assert (label["kind"], label["variant"], label["nodes"]) == ("user_error", "sigkill", ["gpu-node-002"])


def test_a_sigkill_naming_no_node_kills_every_nodes_processes_at_once() -> None:
    events, [label] = simulate({"kind": "user_error", "at_s": 300, "variant": "sigkill"})
    exits = [e for e in events if isinstance(e, LogEvent) and e.category == "exit" and e.exit_code]
    assert len({e.node for e in exits}) == 4 and len({e.exit_code for e in exits}) == 1
    assert max(e.ts for e in exits) - min(e.ts for e in exits) < 1.0
    assert label["nodes"] == []


def test_a_link_fail_slow_is_a_third_of_its_siblings_with_symbol_errors_and_a_short_one_is_labelled_transient() -> None:
    from trainguard.schemas.records import RdmaSample

    events, [label] = simulate({"kind": "network", "at_s": 300, "variant": "fail_slow", "node": 1, "gpu": 2,
                                "duration_s": 60})
    during = [s for s in events if isinstance(s, RdmaSample) and s.node == "gpu-node-001"
              and T0 + 310 <= s.ts < T0 + 350]
    assert during
    for s in during:
        rates = [p.tx_bps for p in s.ports]
        assert rates[2] < 0.45 * sorted(rates)[len(rates) // 2]
    assert during[-1].ports[2].symbol_errors > during[0].ports[2].symbol_errors
    assert label["transient"] is True


def test_the_third_blip_of_one_node_within_an_hour_is_labelled_a_fault_to_report_not_a_transient() -> None:
    data: dict[str, Any] = {"name": "t", "seed": 9, "duration_s": 3000,
                            "job": {"nodes": 2, "gpus_per_node": 4, "tp": 4, "pp": 1, "step_time_s": 5.0},
                            "faults": [{"kind": "network", "at_s": 300 + 600 * i, "variant": "fail_slow", "node": 0,
                                        "duration_s": 60} for i in range(3)]
                            + [{"kind": "network", "at_s": 2200, "variant": "fail_slow", "node": 0,
                                "duration_s": 400}]}
    _, labels = run_scenario(parse_scenario(data))
    assert [lab.get("transient", False) for lab in labels] == [True, True, False, False]
