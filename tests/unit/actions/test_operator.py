"""actions.operator: a console operator's command applied to act's rails and decisions (pure)."""

from __future__ import annotations

from collections.abc import Callable

from trainguard.actions.operator import apply_operator_command, passing_selfcheck, record_selfcheck
from trainguard.schemas.records import Decision, OperatorCommand

RAILS = {"breaker": {"tripped": True, "reason": "3/8 nodes of job llm", "evictions": [[1.0, "llm", "n1"]]},
         "pool": {"spares": ["s1"], "swaps": {"s0": "n3"}}, "evicted": {"llm": ["n3", "n4"]}}


def cmd(verb: str, subject: str = "", ts: float = 100.0, **kw: object) -> OperatorCommand:
    return OperatorCommand(ts=ts, id=f"op-{verb}", verb=verb, operator="alice", subject_id=subject, **kw)  # type: ignore[arg-type]


DecisionFactory = Callable[..., Decision]


def test_approve_moves_an_awaiting_decision_to_planned_and_audits_the_operator(decision_factory: DecisionFactory) -> None:
    out = apply_operator_command(cmd("approve", "d1"), rails=RAILS, decision=decision_factory(job="llm", status="awaiting_approval"), now=101.0)
    assert out.applied and out.decision is not None and out.decision.status == "planned"
    assert out.audit.actor == "alice" and out.audit.event == "operator_approve"
    assert out.audit.detail["command"] == "op-approve" and out.audit.detail["job"] == "llm"


def test_reject_blocks_and_a_second_click_changes_nothing(decision_factory: DecisionFactory) -> None:
    out = apply_operator_command(cmd("reject", "d1", reason="flaky switch"), rails=RAILS, decision=decision_factory(job="llm", status="awaiting_approval"),
                                 now=101.0)
    assert out.applied and out.decision is not None and out.decision.status == "blocked"
    assert "flaky switch" in out.message
    again = apply_operator_command(cmd("approve", "d1"), rails=RAILS, decision=out.decision, now=101.0)
    assert not again.applied and again.decision is out.decision and "not awaiting" in again.message


def test_unknown_decision_is_refused() -> None:
    out = apply_operator_command(cmd("approve", "nope"), rails=RAILS, decision=None, now=101.0)
    assert not out.applied and out.decision is None


def test_reset_closes_the_breaker_without_touching_the_input() -> None:
    out = apply_operator_command(cmd("reset_breaker"), rails=RAILS, decision=None, now=101.0)
    assert out.applied and out.rails["breaker"] == {"tripped": False, "reason": "", "evictions": []}
    assert RAILS["breaker"]["tripped"] is True  # pure: the caller's state is unchanged
    assert out.rails["pool"] == RAILS["pool"]


def test_a_stale_command_is_refused() -> None:
    out = apply_operator_command(cmd("reset_breaker", ts=100.0), rails=RAILS, decision=None, now=1000.0,
                                 max_age_s=300.0)
    assert not out.applied and out.rails["breaker"]["tripped"] is True and "old" in out.message


def test_return_node_needs_a_passing_selfcheck_that_act_holds() -> None:
    passing = {"passed": True, "machines": ["n3"]}
    held = record_selfcheck({}, ["n3"], passed=True, source="d-1-sc", now=100.0)
    forged = apply_operator_command(cmd("return_node", "n3", report=passing), rails=RAILS, decision=None, now=101.0)
    assert not forged.applied and forged.rails["pool"]["spares"] == ["s1"]  # a report in the request: nothing
    assert "no self-check" in forged.message
    failed = record_selfcheck(held, ["n3"], passed=False, source="d-2-sc", now=100.5)  # the newest verdict wins
    refused = apply_operator_command(cmd("return_node", "n3"), rails=RAILS, decision=None, now=101.0, checks=failed)
    assert not refused.applied and "failed" in refused.message
    other = apply_operator_command(cmd("return_node", "n4"), rails=RAILS, decision=None, now=101.0, checks=held)
    assert not other.applied
    out = apply_operator_command(cmd("return_node", "n3"), rails=RAILS, decision=None, now=101.0, checks=held)
    assert out.applied and out.rails["pool"]["spares"] == ["s1", "n3"] and out.rails["evicted"]["llm"] == ["n4"]
    twice = apply_operator_command(cmd("return_node", "n3"), rails=out.rails, decision=None, now=101.0, checks=held)
    assert not twice.applied and twice.rails["pool"]["spares"] == ["s1", "n3"]


def test_passing_selfcheck_reads_stage_digests_too() -> None:
    report = {"passed": True, "stages": [{"detail": {"digests": {"n7": "abc"}}}]}
    assert passing_selfcheck(report, "n7") and not passing_selfcheck(report, "n8")


def test_a_command_dated_ahead_of_acts_clock_is_refused_not_kept_fresh_for_ever() -> None:
    ahead = cmd("reset_breaker", ts=101.0 + 10_000)  # a year's replay window, were it accepted
    out = apply_operator_command(ahead, rails=RAILS, decision=None, now=101.0, max_age_s=300)
    assert not out.applied and "ahead of act's clock" in out.message
    assert out.rails["breaker"]["tripped"]
    near = apply_operator_command(cmd("reset_breaker", ts=160.0), rails=RAILS, decision=None, now=101.0)
    assert near.applied  # a console clock a minute ahead is tolerated
