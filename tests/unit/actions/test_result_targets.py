"""Act's edge drops a node's signed result for a command that did not address it (issue 20, item 2).

The bus, the merge and the runner already leave such a result out of a step;
these tests hold `ActCore.trusts` (what the Faust loop asks before `observe`,
which feeds the ETTR account and the `action_result` audit) to the same rule,
with real Ed25519 node keys and act's real journal as the source of targets.
"""

from __future__ import annotations

import threading
from pathlib import Path

from fakes import Scripted, answer

from tests.unit.actions.rails_kit import build, events, hw
from trainguard.actions.core import ActCore
from trainguard.actions.knowledge import JobKnowledge
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import ActionCommand, ActionResult, Record
from trainguard.schemas.signing import generate, load_ring, load_signer


def _signed(keys: Path, node: str, result: ActionResult) -> tuple[bytes, list[tuple[str, bytes]]]:
    value = Codec().encode(result)
    return value, load_signer(keys / f"{node}.key").headers(value)


def _edge(core: ActCore, keys: Path, node: str, result: ActionResult) -> bool:
    """What the loop does with one result from the results topic: trust it, then observe it."""
    value, headers = _signed(keys, node, result)
    trusted = core.trusts(result, value, headers, topic="action-results", offset=7)
    if trusted:
        core.observe(result)
    return trusted


def _result(command_id: str, node: str, action: str = "evict_node", status: str = "failed") -> ActionResult:
    return ActionResult(ts=1.0, command_id=command_id, action=action, status=status,  # type: ignore[arg-type]
                        job="j0", node=node)


def test_a_non_targets_signed_result_reaches_neither_the_audit_nor_the_ettr_account(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    for node in ("j0n1", "j0n2"):
        generate(keys, node)
    entered, release = threading.Event(), threading.Event()

    def slow(command: ActionCommand, targets: list[str]) -> ActionResult:
        entered.set()
        release.wait(10)
        return answer("ok")(command, targets)

    executor = Scripted(evict=slow)
    eng, runner, audit = build(tmp_path, executor)
    core = ActCore(engine=eng, runner=runner, knowledge=JobKnowledge(runner.journal, eng, eng.checkpoints),
                   publish=audit.append, node_keys=load_ring([keys]))
    try:
        core.decide(hw("j0", "j0n1"))
        assert entered.wait(10)
        (evict, _), = [(c, t) for c, t in executor.calls if c.action == "evict_node"]
        localised_before = core.ettr.snapshot("j0")
        # in flight (act knows the targets from the journaled intent)
        assert not _edge(core, keys, "j0n2", _result(evict.id, "j0n2"))
        assert not _edge(core, keys, "j0n2", _result(evict.id, "j0n2", action="self_check", status="ok"))
        assert _edge(core, keys, "j0n1", _result(evict.id, "j0n1", status="ok"))
        release.set()
        core.close(wait=True)
        # settled (the intent is gone; the journaled step keeps whom it addressed)
        assert not _edge(core, keys, "j0n2", _result(evict.id, "j0n2"))
        assert _edge(core, keys, "j0n1", _result(evict.id, "j0n1", status="ok"))
        # a command act never sent addresses nobody
        assert not _edge(core, keys, "j0n2", _result(evict.id.rsplit("-", 1)[0] + "-" + "f" * 32, "j0n2"))
        assert core.ettr.snapshot("j0") == localised_before
        assert runner.journal.get_state("selfchecks").get("j0n2") is None
    finally:
        release.set()
        runner.journal.close()
    rejected = events(audit, "result_rejected")
    assert len(rejected) == 4 and all(e.detail["node"] == "j0n2" for e in rejected)
    assert all(e.detail["reason"].startswith("not a target") for e in rejected)
    assert "addressed: j0n1" in rejected[0].detail["reason"] and rejected[0].detail["offset"] == 7
    observed: list[Record] = events(audit, "action_result")  # type: ignore[assignment]
    assert [a.actor for a in observed] == ["j0n1", "j0n1"]  # type: ignore[attr-defined]


def test_each_machine_of_a_self_check_is_the_one_target_of_its_own_command(tmp_path: Path) -> None:
    """A fanned-out check's per-machine ids are derived, not journaled: act derives them again."""
    from trainguard.actions.selfcheck.fanout import machine_command_id

    eng, runner, _ = build(tmp_path, Scripted())
    try:
        command = ActionCommand(ts=1.0, id="d1-0-" + "a" * 32, action="self_check", job="j0", nodes=["m1", "m2"])
        runner.journal.record_intent("d1", 0, command)
        assert runner.addressed(command.id) == {"m1", "m2"}
        assert runner.addressed(machine_command_id(command.id, "m2")) == {"m2"}
        assert runner.addressed(machine_command_id(command.id, "m3")) is None
        assert runner.addressed("not-a-command") is None
    finally:
        runner.journal.close()


def test_a_target_answering_with_another_action_is_not_counted_as_that_action(tmp_path: Path) -> None:
    """A real target's signed answer to its stop, labelled a passing self-check, must not earn it a
    return to the pool; its answer under the agent's own verb for the action (stop) still counts."""
    keys = tmp_path / "keys"
    generate(keys, "j0n1")
    entered, release = threading.Event(), threading.Event()

    def slow(command: ActionCommand, targets: list[str]) -> ActionResult:
        entered.set()
        release.wait(10)
        return answer("ok")(command, targets)

    executor = Scripted(evict=slow)
    eng, runner, audit = build(tmp_path, executor)
    core = ActCore(engine=eng, runner=runner, knowledge=JobKnowledge(runner.journal, eng, eng.checkpoints),
                   publish=audit.append, node_keys=load_ring([keys]))
    try:
        core.decide(hw("j0", "j0n1"))
        assert entered.wait(10)
        (evict, _), = [(c, t) for c, t in executor.calls if c.action == "evict_node"]
        assert not _edge(core, keys, "j0n1", _result(evict.id, "j0n1", action="self_check", status="ok"))
        assert _edge(core, keys, "j0n1", _result(evict.id, "j0n1", action="stop", status="ok"))
        assert _edge(core, keys, "j0n1", _result(evict.id, "j0n1", action="evict_node", status="ok"))
        assert runner.journal.get_state("selfchecks").get("j0n1") is None
    finally:
        release.set()
        core.close(wait=True)
        runner.journal.close()
    rejected = events(audit, "result_rejected")
    assert len(rejected) == 1 and rejected[0].detail["reason"].startswith("answers another action: self_check")
