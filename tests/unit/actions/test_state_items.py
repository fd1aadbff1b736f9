"""act's state as items: the record mapping, the topic fold (stale writers fenced) and the reconcile rule."""

from __future__ import annotations

import json
from pathlib import Path

from trainguard.actions.journal import Journal
from trainguard.actions.state_items import Folded, Item, claim, fold, from_record, reconcile, to_record
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import ActionCommand, ActionResult, Decision, PlannedAction

RAILS = {"evicted": {"j": ["n1"]}, "cooldown": {"n1": 5.0}}


def records(*items: Item) -> list[tuple[bytes, bytes | None]]:
    return [to_record(i) for i in items]


def test_an_item_round_trips_through_its_record_and_a_deletion_is_a_tombstone() -> None:
    item = Item("state/rails", (3, 17), RAILS)
    key, value = to_record(item)
    assert key == b"state/rails" and value is not None
    assert from_record(key, value) == item
    assert to_record(Item("intent/d/0", (3, 18), None)) == (b"intent/d/0", None)
    assert from_record(b"state/rails", b"not json") is None  # unreadable: skipped, never a crash


def test_fold_keeps_the_newest_version_and_applies_tombstones() -> None:
    folded = fold(records(Item("state/rails", (1, 1), {"v": 1}), Item("intent/d/0", (1, 2), {"c": 1}),
                          Item("state/rails", (1, 3), {"v": 2}), Item("intent/d/0", (1, 4), None)))
    assert folded.items["state/rails"].value == {"v": 2}
    assert folded.items["intent/d/0"].deleted
    assert folded.newest == (1, 3)  # a tombstone is dated at the record before it


def test_a_stale_writer_after_its_successor_claimed_the_topic_is_ignored() -> None:
    old, new = Item("state/rails", (1, 5), {"evicted": {}}), Item("state/rails", (2, 7), RAILS)
    zombie = Item("state/rails", (1, 8), {"evicted": {}})  # the old act, still running, writes after the claim
    folded = fold(records(old, claim(2, 6, "act@b"), new, zombie))
    assert folded.items["state/rails"].value == RAILS
    assert folded.stale == 1 and folded.epoch == 2


def test_a_fresh_machine_takes_everything_from_the_topic() -> None:
    remote = fold(records(Item("state/rails", (1, 5), RAILS), Item("decision/d", (1, 6), {"id": "d"})))
    out = reconcile({}, remote)
    assert {i.key: i.value for i in out.to_local} == {"state/rails": RAILS, "decision/d": {"id": "d"}}
    assert out.epoch == 2 and out.seq == 7
    assert [i.key for i in out.to_publish] == ["writer"]  # only its claim


def test_newest_version_wins_per_key_both_ways() -> None:
    local = {"state/rails": Item("state/rails", (1, 9), RAILS),  # journaled, never mirrored
             "state/engine": Item("state/engine", (1, 2), {"old": True})}
    remote = fold(records(Item("state/rails", (1, 4), {}), Item("state/engine", (1, 8), {"new": True})))
    out = reconcile(local, remote, "me")
    assert [(i.key, i.value) for i in out.to_local] == [("state/engine", {"new": True}), ("state/rails", RAILS)]
    claimed, republished = out.to_publish
    assert claimed.key == "writer" and claimed.version == (2, 10)
    assert republished.key == "state/rails" and republished.value == RAILS
    assert republished.version == (2, 11) and out.seq == 11  # re-versioned: the fold must not fence it
    assert fold(records(*out.to_publish), into=remote).items["state/rails"].value == RAILS


def test_a_local_item_the_topic_deleted_is_deleted_and_an_unmirrored_one_is_kept() -> None:
    local = {"intent/d/0": Item("intent/d/0", (1, 3), {"c": 1}), "intent/d/1": Item("intent/d/1", (1, 9), {"c": 2})}
    remote = Folded(items={}, newest=(1, 6), epoch=1)  # intent/d/0's tombstone was compacted away
    out = reconcile(local, remote)
    assert [(i.key, i.deleted) for i in out.to_local] == [("intent/d/0", True), ("intent/d/1", False)]
    assert [i.key for i in out.to_publish] == ["writer", "intent/d/1"]


def test_reconcile_is_deterministic() -> None:
    local = {f"state/k{i}": Item(f"state/k{i}", (1, i), {"i": i}) for i in range(10)}
    remote = fold(records(*(Item(f"state/k{i}", (1, 20 - i), {"r": i}) for i in range(0, 10, 2))))
    assert reconcile(local, remote) == reconcile(dict(reversed(local.items())), remote)


def test_the_journal_hands_over_versioned_items_and_rebuilds_from_them(tmp_path: Path) -> None:
    seen: list[Item] = []
    old = Journal(tmp_path / "old.sqlite")
    old.listen(seen.extend)
    decision = Decision(ts=1.0, id="d1", incident_id="i1", kind="hw_fault", job="j", rule="r", reason="x",
                        plan=[PlannedAction(action="evict_node", nodes=["n1"])])
    old.record_decision(decision, {"engine": {"nan_steps": {}}})
    command = ActionCommand(ts=2.0, id="c1", action="evict_node", job="j", nodes=["n1"], decision_id="d1")
    old.record_intent("d1", 0, command)
    old.record_step("d1", 0, ActionResult(ts=3.0, command_id="c1", action="evict_node", status="ok", job="j"),
                    state={"rails": RAILS})
    old.put_states({"ettr:j": {"steps": [[1, 2.0, 1.0]]}})
    assert [(i.key, i.version[1]) for i in seen] == [
        ("decision/d1", 1), ("state/engine", 2), ("intent/d1/0", 3), ("step/d1/0", 4), ("intent/d1/0", 5),
        ("state/rails", 6), ("state/ettr:j", 7)]
    assert seen[4].deleted  # the answered intent is a tombstone

    new = Journal(tmp_path / "new.sqlite")  # a fresh machine: the topic's fold of what was handed over
    out = reconcile(new.items(), fold(records(*seen)))
    new.apply(out.to_local)
    new.begin_epoch(out.epoch, out.seq)
    assert new.decision_for("i1") == decision
    assert new.steps("d1") == old.steps("d1") and new.intent("d1", 0) is None
    assert new.get_state("rails") == RAILS and new.get_state("ettr:j") == old.get_state("ettr:j")
    live = [{k: i.value for k, i in j.items().items() if not i.deleted} for j in (new, old)]
    assert live[0] == live[1]
    assert new.version() == (1, 8)  # its own epoch (the old one wrote as 0), numbering above the claim


def test_an_old_machines_journal_coming_back_takes_the_newer_writers_decision(tmp_path: Path) -> None:
    """Divergent histories: the old act journaled d-old for an incident but never mirrored it; the new act
    decided the redelivered incident as d-new. The old journal, back, ends up with d-new only."""
    def decided(decision_id: str) -> Decision:
        return Decision(ts=1.0, id=decision_id, incident_id="i1", kind="nan", job="j", rule="r", reason="x", plan=[])

    old = Journal(tmp_path / "old.sqlite")
    old.begin_epoch(1, 0)
    old.record_decision(decided("d-old"))
    topic = [to_record(claim(2, 5, "new")), to_record(Item("decision/d-new", (2, 6), as_json(decided("d-new"))))]
    out = reconcile(old.items(), fold(topic))
    old.apply(out.to_local)
    assert old.decision_for("i1") == decided("d-new") and old.get("d-old") is None
    assert [i.key for i in out.to_publish] == ["writer"]


def as_json(decision: Decision) -> object:
    """A decision as the journal hands it over (its codec's JSON, decoded)."""
    return json.loads(Codec().encode(decision))
