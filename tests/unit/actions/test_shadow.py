"""The shadow report's aggregation (issue 25 item 2) and `trainguard actions report` over a real journal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainguard.actions.journal import Journal
from trainguard.actions.shadow import responses, shadow_report
from trainguard.cli import main
from trainguard.schemas.plan import CulpritsOf, PlannedAction
from trainguard.schemas.records import Decision


def decision(n: int, rule: str, status: str, *, job: str = "j", ts: float = 100.0, would_block: str = "",
             plan: list[PlannedAction] | None = None, kind: str = "hw_fault") -> Decision:
    steps = plan if plan is not None else [
        PlannedAction(action="evict_node", nodes=[f"n{n}"]), PlannedAction(action="swap_standby"),
        PlannedAction(action="restart_from_checkpoint")]
    return Decision(ts=ts, id=f"d{n}", incident_id=f"i{n}", job=job, kind=kind, rule=rule,  # type: ignore[arg-type]
                    plan=steps, reason="r", status=status, would_block=would_block)  # type: ignore[arg-type]


def test_counts_what_each_rule_would_have_done_and_what_the_breaker_would_have_blocked() -> None:
    rows = shadow_report([
        decision(1, "hw_fault.evict_swap_restart", "observed"),
        decision(2, "hw_fault.evict_swap_restart", "observed", would_block="circuit breaker tripped: 2/8"),
        decision(3, "hw_fault.evict_swap_restart", "executed"),
        decision(4, "hw_fault.evict_swap_restart", "observed", plan=[PlannedAction(action="evict_node", nodes=["n1"])]),
        decision(5, "user_error.rollback", "awaiting_approval", kind="user_error",
                 plan=[PlannedAction(action="rollback_code")]),
        decision(6, "hang.check_then_evict", "observed", kind="hang",
                 plan=[PlannedAction(action="self_check", nodes=["a", "b"]),
                       PlannedAction(action="evict_node", targets_from=CulpritsOf(step=0))]),
    ], modes={"hw_fault.evict_swap_restart": "observe"})
    by = {r.rule: r for r in rows}
    hw = by["hw_fault.evict_swap_restart"]
    assert rows[0] is hw and hw.mode == "observe" and by["user_error.rollback"].mode == ""
    assert (hw.decisions, hw.observed, hw.acted, hw.held, hw.would_block) == (4, 3, 1, 0, 1)
    assert (hw.evictions, hw.nodes, hw.restarts, hw.rollbacks) == (4, ["n1", "n2", "n3"], 3, 0)
    rb = by["user_error.rollback"]
    assert (rb.held, rb.rollbacks, rb.restarts, rb.evictions) == (1, 1, 0, 0)
    hang = by["hang.check_then_evict"]
    assert (hang.evictions, hang.nodes) == (1, [])  # its culprit is named only at run time: counted once
    assert hw.verdicts == {} and hw.basis == ""  # no verdicts known, no episodes given


def test_saving_is_measured_against_the_rules_automated_responses_else_an_upper_bound() -> None:
    episodes = {"j": {"last": 1000.0, "episodes": [
        [90.0, 100.0, 120.0, 400.0, 5, 0],   # d1 observed: 300 s until the job trained again
        [190.0, 200.0, None, None, 9, 0],    # d2 observed, never recovered: until the last record, 800 s
        [290.0, 300.0, 310.0, 360.0, 12, 1],  # d3 acted: 60 s
        [490.0, 500.0, 510.0, 600.0, 14, 2],  # d4 acted: 100 s
    ]}, "k": {"last": 50.0, "episodes": [[5.0, 10.0, None, 40.0, 1, 0]]}}
    took = responses(episodes)
    assert took[("j", 200.0)] == 800.0 and took[("k", 10.0)] == 30.0
    rows = shadow_report([
        decision(1, "r.auto", "observed", ts=100.0), decision(2, "r.auto", "observed", ts=200.0),
        decision(3, "r.auto", "executed", ts=300.0), decision(4, "r.auto", "failed", ts=500.0),
        decision(5, "r.never", "observed", job="k", ts=10.0),
        decision(6, "r.never", "observed", job="k", ts=11.0),  # no episode at that time: counts nothing
    ], response_s=took, verdicts={"r.auto": {"true": 2, "false": 1}})
    by = {r.rule: r for r in rows}
    assert by["r.auto"].unproductive_s == 1100.0 and by["r.auto"].basis == "measured"
    assert by["r.auto"].saved_s == (300.0 - 80.0) + (800.0 - 80.0)  # median automated response 80 s
    assert by["r.never"].saved_s == by["r.never"].unproductive_s == 30.0 and by["r.never"].basis == "upper bound"
    assert by["r.auto"].verdicts == {"true": 2, "false": 1, "unsure": 0} and by["r.never"].verdicts == {}
    assert json.loads(json.dumps(by["r.auto"].as_dict()))["saved_s"] == 940.0


def test_actions_report_reads_the_journal_in_a_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import time

    monkeypatch.setenv("TRAINGUARD_ACTIONS__STATE_DIR", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "240")  # rich folds a table to the terminal's width
    now = time.time()
    journal = Journal(tmp_path / "journal.sqlite")
    journal.record_decision(decision(1, "hw_fault.evict_swap_restart", "observed", ts=now - 60))
    journal.record_decision(decision(2, "hw_fault.evict_swap_restart", "executed", ts=now - 30, job="other"))
    journal.record_decision(decision(3, "hw_fault.evict_swap_restart", "observed", ts=now - 10 * 86400))  # too old
    journal.put_state("rollout", {"kinds": {"hw_fault": "auto"}, "rules": {}})  # promoted by an operator
    journal.close()
    assert main(["actions", "report", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (row,) = out["rules"]
    assert (row["decisions"], row["observed"], row["acted"], row["mode"]) == (2, 1, 1, "auto")
    assert main(["actions", "report", "--json", "--job", "other", "--since", "1h"]) == 0
    assert json.loads(capsys.readouterr().out)["rules"][0]["decisions"] == 1
    assert main(["actions", "report", "--since", "30d"]) == 0
    table = capsys.readouterr().out
    assert "hw_fault.evict_swap_restart" in table and "3 decisions in the last 30d" in table
    assert "3 2/1/0" in table and "evict 3 (3 nodes), 3 restarts, 0 rollbacks" in table
    for bad in ("soon", "-1d", "0s", "infd"):
        with pytest.raises(SystemExit) as exit_:
            main(["actions", "report", "--since", bad])
        assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "not a duration" in err
