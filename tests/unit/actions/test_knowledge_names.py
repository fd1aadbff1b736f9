"""A journaled topology naming a node with a hostile name is not restored (actions.knowledge).

Act's journal is mirrored to the act-state topic and restored from it on a new
machine, so its entries can be forged like any record. A topology entry whose
node names hold an escape sequence or a bidirectional control would steer
evictions to a name the codec refuses on the wire: `load` leaves that job's
topology unknown and restores the others.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.actions.checkpoints import CheckpointRegistry
from trainguard.actions.engine import DecisionEngine
from trainguard.actions.journal import Journal
from trainguard.actions.knowledge import JobKnowledge
from trainguard.schemas.records import JobTopology


@pytest.mark.parametrize("node", ["b\x1b[2J", "b\u202e", "b\n"])
def test_a_forged_topology_entry_is_not_restored_and_the_others_are(tmp_path: Path, node: str) -> None:
    journal = Journal(tmp_path / "act.sqlite")
    first = JobKnowledge(journal, DecisionEngine(CheckpointRegistry()), CheckpointRegistry())
    first.observe_topology(JobTopology(ts=1.0, job="good", world_size=2, rank_nodes={0: "a", 1: "b"}))
    journal.put_state("topology:forged", {"type": "topology", "job": "forged", "world_size": 2,
                                          "rank_nodes": {"0": "a", "1": node}, "ts": 1.0})
    engine = DecisionEngine(CheckpointRegistry())
    JobKnowledge(journal, engine, CheckpointRegistry()).load()
    assert engine.topologies["good"].nodes == ["a", "b"]
    assert "forged" not in engine.topologies
