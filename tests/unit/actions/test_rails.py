"""The rails against a hostile writer and a partitioned network (issue 20, items 2, 3, 4, 6).

The executors are in-memory stand-ins for agents and schedulers: what is
asserted is what the runner sends and what the breaker counts, with real
threads where two plans race for one breaker slot.
"""

from __future__ import annotations

import threading
from pathlib import Path

from fakes import Clock, Scripted, answer

from tests.unit.actions.rails_kit import build, events, hw, run_one
from trainguard.actions.executors.base import merge_results
from trainguard.actions.runner import PlanRunner
from trainguard.actions.safety import CircuitBreaker
from trainguard.actions.sent_commands import did_nothing
from trainguard.actions.topology import job_members
from trainguard.schemas.records import ActionCommand, ActionResult

# ------------------------------------------------------------ reserve before send


def test_a_second_plan_cannot_pass_the_check_while_the_first_is_still_sending(tmp_path: Path) -> None:
    """The measured race: plan A's eviction waits for agents; plan B of another job must see A's node counted."""
    entered, release = threading.Event(), threading.Event()

    def slow(command: ActionCommand, targets: list[str]) -> ActionResult:
        entered.set()
        release.wait(10)
        return answer("ok")(command, targets)

    executor = Scripted(evict=slow)
    eng, runner, _ = build(tmp_path, executor, jobs=2, fleet_max=1)
    first = threading.Thread(target=run_one, args=(eng, runner, hw("j0", "j0n1")))
    first.start()
    assert entered.wait(10)
    try:
        assert run_one(eng, runner, hw("j1", "j1n1")) == "blocked"  # fleet cap 1: A's node already counts
    finally:
        release.set()
        first.join(10)
    assert executor.sent("evict_node") == [["j0n1"]]


def test_a_timed_out_eviction_stays_counted_and_in_cooldown_and_the_plan_stops(tmp_path: Path) -> None:
    executor = Scripted(evict=answer("failed", per_node={}))  # nobody answered in time
    eng, runner, audit = build(tmp_path, executor, fleet_max=1)
    assert run_one(eng, runner, hw("j0", "j0n1")) == "failed"
    assert executor.sent("restart_from_checkpoint") == []  # no restart around a node that may still run
    assert runner.rails.breaker.counted(runner.clock()) == {"j0n1"}
    assert not runner.rails.cooldown.check(["j0n1"], ts=runner.clock()).allowed
    assert any("j0n1" in e.detail.get("nodes", []) for e in events(audit, "escalation"))
    assert run_one(eng, runner, hw("j0", "j0n2")) == "blocked"  # the silent stop still takes the one slot


def test_an_eviction_refused_before_sending_gives_its_slot_back(tmp_path: Path) -> None:
    def refuse_n1(command: ActionCommand, targets: list[str]) -> ActionResult:
        return answer("rejected" if command.nodes == ["j0n1"] else "ok")(command, targets)

    executor = Scripted(evict=refuse_n1)  # e.g. an invalid node name: nothing left act
    eng, runner, audit = build(tmp_path, executor, fleet_max=1)
    assert run_one(eng, runner, hw("j0", "j0n1")) == "blocked"
    assert runner.rails.breaker.counted(runner.clock()) == set()
    assert runner.rails.cooldown.check(["j0n1"], ts=runner.clock()).allowed
    assert [e.detail["nodes"] for e in events(audit, "reservation_released")] == [["j0n1"]]
    assert run_one(eng, runner, hw("j0", "j0n2", tag="b")) == "executed"  # the slot is free again


def test_only_the_nodes_whose_signed_answer_says_they_did_nothing_are_released(tmp_path: Path) -> None:
    breaker = CircuitBreaker(max_fraction=1.0, window_s=60, fleet_max_evictions=8)
    assert breaker.reserve(job="", nodes=["a", "b", "c"], job_size=0, now=0.0, tag="c1").allowed
    merged = ActionResult(ts=1.0, command_id="c1", action="evict_node", status="failed",
                          details={"per_node": {"a": "rejected", "b": "ok"}})  # c never answered
    quiet = did_nothing(ActionCommand(ts=0.0, id="c1", action="evict_node", nodes=["a", "b", "c"]), merged)
    assert quiet == ["a"]
    assert breaker.release("c1", quiet) == ["a"]
    assert breaker.counted(1.0) == {"b", "c"}
    assert breaker.release("other", None) == []  # another command's tag releases nothing


def test_a_reservation_is_journaled_with_the_intent_and_survives_a_restart(tmp_path: Path) -> None:
    def killed(command: ActionCommand, targets: list[str]) -> ActionResult:
        raise RuntimeError("act killed while the stop was on the wire")

    eng, runner, _ = build(tmp_path, Scripted(evict=killed), fleet_max=1)
    decision = runner.admit(eng.decide(hw("j0", "j0n1")))
    assert decision is not None
    try:
        runner.run(decision)
    except RuntimeError:
        pass
    eng2, restarted, _ = build(tmp_path, Scripted(), fleet_max=1)  # a new act on the same journal
    assert restarted.rails.breaker.counted(restarted.clock()) == {"j0n1"}
    assert run_one(eng2, restarted, hw("j0", "j0n2")) == "blocked"


def test_the_lock_is_free_while_an_executor_waits(tmp_path: Path) -> None:
    """One lock discipline: no block of `run` spans the executor, so another thread takes the lock meanwhile."""
    seen: list[bool] = []
    holder: list[PlanRunner] = []

    def probe(command: ActionCommand, targets: list[str]) -> ActionResult:
        got: list[bool] = []

        def take() -> None:
            got.append(holder[0].lock.acquire(timeout=5))
            if got[0]:
                holder[0].lock.release()

        t = threading.Thread(target=take)
        t.start()
        t.join(10)
        seen.extend(got)
        return answer("ok")(command, targets)

    eng, runner, _ = build(tmp_path, Scripted(evict=probe))
    holder.append(runner)
    assert run_one(eng, runner, hw("j0", "j0n1")) == "executed"
    assert seen == [True]


# ------------------------------------------------------------ act's own clock


def test_spread_out_incident_times_still_meet_in_the_window(tmp_path: Path) -> None:
    executor = Scripted()
    clock = Clock(1000.0)
    eng, runner, _ = build(tmp_path, executor, jobs=4, fleet_max=2, clock=clock)
    statuses = []
    for j in range(4):  # dated a day apart, received within a minute
        clock.now += 10
        statuses.append(run_one(eng, runner, hw(f"j{j}", f"j{j}n1", ts=100.0 + j * 86400)))
    assert statuses == ["executed", "executed", "blocked", "blocked"]
    assert len(executor.sent("evict_node")) == 2


def test_a_future_dated_incident_expires_nothing(tmp_path: Path) -> None:
    executor = Scripted()
    clock = Clock(1000.0)
    eng, runner, _ = build(tmp_path, executor, jobs=3, fleet_max=1, clock=clock)
    assert run_one(eng, runner, hw("j0", "j0n1", ts=1000.0)) == "executed"
    clock.now += 5
    assert run_one(eng, runner, hw("j1", "j1n1", ts=1e12)) == "blocked"  # dated years ahead
    assert runner.rails.breaker.counted(clock()) == {"j0n1"}
    runner.reset_breaker()
    clock.now += 3601  # only act's own time closes the window
    assert run_one(eng, runner, hw("j2", "j2n1", ts=0.0)) == "executed"


# ------------------------------------------------------------ results only from targets


def test_a_merged_result_takes_nothing_from_a_non_target() -> None:
    command = ActionCommand(ts=0.0, id="c", action="self_check", job="j", nodes=["n1"])
    mine = ActionResult(ts=1.0, command_id="c", action="self_check", status="ok", node="n1",
                        details={"passed": True})
    forged = ActionResult(ts=1.0, command_id="c", action="self_check", status="failed", node="n2",
                          details={"culprits": ["n1"], "passed": False, "machine_report": {"machine": "n1"}})
    merged = merge_results(command, [mine, forged], ts=2.0)
    assert merged.status == "ok" and merged.details == {"per_node": {"n1": "ok"}, "passed": True}
    assert "n2" not in merged.message
    alone = merge_results(command, [forged], ts=2.0, missing=["n1"])
    assert alone.status == "failed" and "culprits" not in alone.details


# ------------------------------------------------------------ restart targets


def test_return_then_eviction_restarts_each_member_once_with_every_spare(tmp_path: Path) -> None:
    """The measured bug: after return_node the restart went to [n1, n2, n4, n2]."""
    executor = Scripted()
    clock = Clock()
    eng, runner, _ = build(tmp_path, executor, nodes=4, spares=["s0"], clock=clock, fraction=0.5)
    assert run_one(eng, runner, hw("j0", "j0n1")) == "executed"  # j0n1 out, s0 in
    assert executor.sent("restart_from_checkpoint")[-1] == ["j0n0", "s0", "j0n2", "j0n3"]
    runner.journal.request_node_return("j0n1")  # repaired, self-check passed
    runner.poll_operator()
    clock.now += 10
    assert run_one(eng, runner, hw("j0", "j0n3")) == "executed"  # j0n3 out, the returned j0n1 swapped in
    last = executor.sent("restart_from_checkpoint")[-1]
    assert last == ["j0n0", "s0", "j0n2", "j0n1"] and len(set(last)) == len(last)
    _, restarted, _ = build(tmp_path, Scripted(), nodes=4, clock=clock)  # the swaps are journaled
    assert restarted.replacements["j0"] == [("j0n1", "s0"), ("j0n3", "j0n1")]


def test_members_with_a_stale_or_a_fresh_topology_and_an_unreplaced_eviction() -> None:
    swaps = [("n2", "s0"), ("n4", "n2")]
    stale = job_members(["n1", "n2", "n3", "n4"], swaps, gone={"n4"}, ready_spares=set())
    fresh = job_members(["n1", "s0", "n3", "n2"], swaps, gone={"n4"}, ready_spares=set())
    assert stale == fresh == ["n1", "s0", "n3", "n2"]
    assert job_members(["n1", "n2", "n3"], [], gone={"n2"}, ready_spares=set()) == ["n1", "n3"]
    # evicted without a spare, then returned to the pool: in the pool, not in the job
    assert job_members(["n1", "n2", "n3"], [], gone=set(), ready_spares={"n2"}) == ["n1", "n3"]
    assert job_members(["n1", "n1", "n2"], [("n2", "n1")], gone=set(), ready_spares=set()) == ["n1"]


def test_act_audits_an_incident_dated_far_from_its_clock_and_counts_it_at_receipt(tmp_path: Path) -> None:
    from trainguard.actions.core import ActCore
    from trainguard.actions.knowledge import JobKnowledge

    executor = Scripted()
    clock = Clock(50_000.0)
    eng, runner, audit = build(tmp_path, executor, jobs=2, fleet_max=1, clock=clock)
    core = ActCore(engine=eng, runner=runner, knowledge=JobKnowledge(runner.journal, eng, eng.checkpoints),
                   publish=audit.append, clock=clock, record_skew_s=600.0)
    try:
        core.decide(hw("j0", "j0n1", ts=50_000.0 + 86_400))  # a day ahead
        core.decide(hw("j1", "j1n1", ts=49_900.0))  # within the bound: nothing to say
        core.close(wait=True)
    finally:
        runner.journal.close()
    skewed = events(audit, "record_clock_skew")
    assert [e.subject_id for e in skewed] == ["inc-j0n1"] and skewed[0].detail["skew_s"] == 86_400
    assert executor.sent("evict_node") == [["j0n1"]] or executor.sent("evict_node") == [["j1n1"]]
    assert len(executor.sent("evict_node")) == 1  # fleet cap 1, whatever the dates say
