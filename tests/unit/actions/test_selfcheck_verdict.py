"""The fanned-out self-check's verdict: pure aggregation of per-machine reports.

Reports are built here the way `collectors.agent.selfcheck.machine.run_machine` writes
them (one record per local rank per stage); the e2e test
tests/e2e/test_selfcheck_fanout.py produces real ones through real agents.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from fakes import MACHINES, world

from trainguard.actions.selfcheck.fanout import combine, machine_command_id, machine_commands, report_of
from trainguard.actions.settings import SelfCheckSettings
from trainguard.schemas.action_params import ActionParams
from trainguard.schemas.actions import ACTIONS
from trainguard.schemas.records import ActionCommand, ActionResult
from trainguard.schemas.selfcheck import DEFAULT_CHECKS, aggregate, aggregate_replay

PARAMS = {name: spec.params.__struct_config__.tag for name, spec in ACTIONS.items()}  # action -> its params' tag


def stages(report: Any) -> list[tuple[str, str]]:
    return [(s.name, s.status) for s in report.stages]


def test_all_pass() -> None:
    report = aggregate(MACHINES, world(), ppn=2)
    assert report.passed and report.culprits == [] and report.stage == ""
    assert stages(report) == [("dcgm", "unavailable"), ("all_to_all", "passed"), ("all_gather", "passed"),
                              ("bitwise", "passed")]


def test_one_machine_failing_all_to_all_is_named_and_later_stages_skipped() -> None:
    reports = world()
    reports["n2"]["stages"]["all_to_all"][1]["status"] = "failed"  # type: ignore[index]
    report = aggregate(MACHINES, reports, ppn=2)
    assert not report.passed and report.stage == "all_to_all" and report.culprits == ["n2"]
    assert stages(report)[2:] == [("all_gather", "skipped"), ("bitwise", "skipped")]


def test_one_machine_with_a_flipped_bit_is_named_by_bitwise_only() -> None:
    reports = world()
    reports["n3"]["stages"]["bitwise"][0]["digest"] = "d1"  # type: ignore[index]
    report = aggregate(MACHINES, reports, ppn=2)
    assert stages(report) == [("dcgm", "unavailable"), ("all_to_all", "passed"), ("all_gather", "passed"),
                              ("bitwise", "failed")]
    assert report.culprits == ["n3"]


def test_a_machine_whose_pairs_both_fail_is_named_by_all_gather() -> None:
    reports = world()
    for m in ("n0", "n1", "n2"):  # n1's links fail: its pairs with n0 and n2 fail on both ends
        for rec in reports[m]["stages"]["all_gather"]:  # type: ignore[index]
            for pair in rec["pairs"]:
                if "n1" in pair.split("|"):
                    rec["pairs"][pair] = "failed: DistBackendError"
    report = aggregate(MACHINES, reports, ppn=2)
    assert report.stage == "all_gather" and report.culprits == ["n1"]


def test_a_silent_machine_is_named_first_never_passing() -> None:
    reports = world()
    reports["n1"] = None
    report = aggregate(MACHINES, reports, ppn=2)
    assert not report.passed and report.stage == "agents" and report.culprits == ["n1"]
    assert report.stages[0].detail == {"silent": ["n1"]}
    assert [s.status for s in report.stages[1:]] == ["skipped"] * 4
    alone = aggregate(["n9"], {"n9": None})  # the only machine asked: named as well
    assert alone.culprits == ["n9"] and not alone.passed


def test_every_agent_silent_fails_without_naming_anyone() -> None:
    report = aggregate(MACHINES, {m: None for m in MACHINES}, ppn=2)
    assert not report.passed and report.culprits == [] and report.stage == "agents"


def test_stage_ordering_dcgm_before_collectives() -> None:
    reports = world()
    reports["n0"]["dcgm"] = {"status": "failed"}  # type: ignore[index]
    reports["n2"]["stages"]["all_to_all"][0]["status"] = "failed"  # type: ignore[index]
    report = aggregate(MACHINES, reports, ppn=2)
    assert report.stage == "dcgm" and report.culprits == ["n0"]  # the cheaper stage decides


def test_every_machine_failing_a_stage_names_no_one_but_does_not_pass() -> None:
    reports = world()
    for m in MACHINES:
        reports[m]["stages"]["all_to_all"][0]["status"] = "failed"  # type: ignore[index]
    report = aggregate(MACHINES, reports, ppn=2)
    assert report.culprits == [] and not report.passed and report.stage == "all_to_all"


def test_answers_without_report_pass_or_fail_by_status_and_name_no_one() -> None:
    reports = world()
    reports["n1"] = {"status": "ok"}  # a re-sent command the agent had already run
    assert aggregate(MACHINES, reports, ppn=2).culprits == []
    reports["n1"] = {"status": "failed"}
    report = aggregate(MACHINES, reports, ppn=2)
    assert not report.passed and report.culprits == [] and report.stage == "agents"


def test_replay_fails_the_groups_of_a_wrong_or_silent_member() -> None:
    groups = [["n0", "n1"], ["n2", "n3"]]
    rec = {"stages": {"replay": [{"status": "ok", "ok": True}]}}
    reports: dict[str, dict[str, Any] | None] = {m: rec for m in MACHINES}
    assert aggregate_replay(groups, reports).failed_groups == []
    reports["n2"] = {"stages": {"replay": [{"status": "ok", "ok": False}]}}
    assert aggregate_replay(groups, reports).failed_groups == [1]
    reports["n2"], reports["n0"] = rec, None
    assert aggregate_replay(groups, reports).failed_groups == [0]


# ---------------------------------------------------------------- fan-out


def base_command(action: str = "self_check", **params: Any) -> ActionCommand:
    return ActionCommand(ts=1.0, id="d1-2-" + "f" * 32, action=action, job="j", nodes=MACHINES,  # type: ignore[arg-type]
                         params=msgspec.convert({"kind": PARAMS[action], "machines": MACHINES, **params},
                                                ActionParams))


def test_each_machine_gets_its_own_command_with_the_shared_rendezvous() -> None:
    settings = SelfCheckSettings(rendezvous_host="{node}.job.svc", rendezvous_port=30000, rendezvous_ports=8)
    cmds = machine_commands(base_command(checks=["all_to_all"]), MACHINES, settings=settings, deadline=99.0)
    assert [c.nodes for c in cmds] == [[m] for m in MACHINES]
    assert [c.params.node_rank for c in cmds] == [0, 1, 2, 3]
    assert len({c.id for c in cmds}) == 4 and all(len(c.id.rsplit("-", 1)[1]) == 32 for c in cmds)
    shared = {(c.params.check_id, c.params.rendezvous.host, c.params.rendezvous.port,
               c.params.deadline) for c in cmds}
    assert len(shared) == 1
    check_id, host, port, deadline = shared.pop()
    assert host == "n0.job.svc" and 30000 <= port < 30008 and deadline == 99.0
    assert cmds[0].params.checks == ["all_to_all"] and cmds[0].params.procs_per_machine == 2
    again = machine_commands(base_command(checks=["all_to_all"]), MACHINES, settings=settings, deadline=120.0)
    assert [c.id for c in again] == [c.id for c in cmds]  # a re-send after a restart: same ids
    assert machine_command_id(check_id, "n1") == cmds[1].id


@pytest.mark.parametrize("silent", [False, True])
def test_combine_turns_agent_results_into_one_step_result(silent: bool) -> None:
    base = base_command()
    sent = machine_commands(base, MACHINES, settings=SelfCheckSettings(procs_per_machine=2), deadline=9.0)[0]
    reports = world()
    reports["n3"]["stages"]["bitwise"][1]["digest"] = "bad"  # type: ignore[index]
    results = {m: ActionResult(ts=1.0, command_id=f"c-{m}", action="self_check", status="ok", node=m,
                               details={"per_node": {m: "ok"}, "machine_report": reports[m]}) for m in MACHINES}
    if silent:  # the local executor's answer for an agent that never replied
        results["n1"] = ActionResult(ts=1.0, command_id="c-n1", action="self_check", status="failed",
                                     details={"per_node": {}})
    assert report_of("n1", results["n1"]) is (None if silent else reports["n1"])
    step = combine(base, sent, MACHINES, results, ts=5.0)
    assert step.command_id == base.id and step.status == "failed"
    assert step.details["culprits"] == (["n1"] if silent else ["n3"])
    assert step.details["stage"] == ("agents" if silent else "bitwise")
    assert step.details["silent"] == (["n1"] if silent else [])
    assert set(DEFAULT_CHECKS) <= {s["name"] for s in step.details["stages"]}


def test_local_executor_sends_every_machine_its_command_before_waiting_for_any() -> None:
    from trainguard.actions.executors.local import LocalExecutor

    events: list[str] = []

    class Bus:
        def send(self, command: ActionCommand) -> ActionCommand:
            events.append(f"send {command.nodes[0]}")
            return command

        def collect(self, command_id: str, *, nodes: list[str], timeout_s: float) -> list[ActionResult]:
            events.append(f"collect {nodes[0]}")
            if nodes[0] == "n2":
                return []  # this agent never answers
            return [ActionResult(ts=1.0, command_id=command_id, action="self_check", status="ok", node=nodes[0],
                                 details={"machine_report": {"machine": nodes[0]}})]

    cmds = machine_commands(base_command(), MACHINES, settings=SelfCheckSettings(), deadline=9.0)
    bad = msgspec.structs.replace(cmds[3], nodes=["n[3-4]"])  # never sent: not one node's name
    results = LocalExecutor(bus=Bus(), timeout_s=1.0, clock=lambda: 2.0).execute_all([*cmds[:3], bad])
    assert events[:3] == ["send n0", "send n1", "send n2"] and events[3:] == ["collect n0", "collect n1", "collect n2"]
    assert [r.status for r in results] == ["ok", "ok", "failed", "rejected"]
    assert report_of("n2", results[2]) is None and report_of("n1", results[1]) == {"machine": "n1"}


def rendezvous_failed(reports: dict[str, dict[str, Any] | None], machine: str, missing: list[int] | None) -> None:
    for records in reports[machine]["stages"].values():  # type: ignore[index]
        for rec in records:
            rec.update(status="failed", rendezvous_failed=True, missing_ranks=missing)


def test_ranks_that_never_reached_the_rendezvous_name_their_machine() -> None:
    reports = world()
    for m in ("n0", "n1", "n3"):
        rendezvous_failed(reports, m, [4, 5])  # n2's ranks (ppn 2) never came
    reports["n2"]["stages"] = {"all_to_all": [], "all_gather": [], "bitwise": []}  # type: ignore[index]
    report = aggregate(MACHINES, reports, ppn=2)
    assert report.stage == "rendezvous" and report.culprits == ["n2"] and not report.passed
    assert [s.status for s in report.stages[1:]] == ["skipped"] * 4


def test_when_rank_0_never_came_the_machine_that_wrote_nothing_is_named() -> None:
    reports = world()
    for m in ("n1", "n2", "n3"):
        rendezvous_failed(reports, m, None)  # no store to reach: nobody knows who is missing
    reports["n0"]["stages"] = {"all_to_all": [], "all_gather": [], "bitwise": []}  # type: ignore[index]
    assert aggregate(MACHINES, reports, ppn=2).culprits == ["n0"]
    reports["n0"] = world()["n0"]  # everyone failed to meet, everyone wrote why: no one to blame
    rendezvous_failed(reports, "n0", None)
    report = aggregate(MACHINES, reports, ppn=2)
    assert report.stage == "rendezvous" and report.culprits == [] and not report.passed


def test_rank_0s_early_stop_names_the_machine_when_a_late_record_hides_it() -> None:
    reports = world()
    for m in MACHINES:  # rank 0 named n2 after all_to_all (its ranks were quiet); every rank stopped there
        reports[m].update(stopped_after="all_to_all", referee_named=["n2"])  # type: ignore[union-attr]
        reports[m]["stages"]["all_gather"] = []  # type: ignore[index]
        reports[m]["stages"]["bitwise"] = []  # type: ignore[index]
    reports["n2"]["referee_named"] = []  # type: ignore[index]  # its late rank found rank 0's store gone
    report = aggregate(MACHINES, reports, ppn=2)  # n2's records came late: act's own reading names no one
    assert report.stage == "all_to_all" and report.culprits == ["n2"]
    assert report.stages[1].detail["named_by"].startswith("rank 0")
    reports["n1"]["stages"]["all_to_all"][0]["status"] = "failed"  # type: ignore[index]
    assert aggregate(MACHINES, reports, ppn=2).culprits == ["n1"]  # act's own reading, when it names someone
