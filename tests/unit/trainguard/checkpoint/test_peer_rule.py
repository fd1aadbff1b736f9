"""The peer rule: a backup never shares a parallel group or a machine with its shard."""

from __future__ import annotations

import pytest

from trainguard.checkpoint.peer import backup_source, choose_peer
from trainguard.topology import coordinates


@pytest.mark.parametrize(("world", "tp", "pp"), [(8, 2, 2), (16, 4, 2), (24, 2, 3), (16, 8, 1), (16, 1, 4)])
def test_peer_is_outside_tp_pp_and_dp_groups(world: int, tp: int, pp: int) -> None:
    peers = []
    for rank in range(world):
        choice = choose_peer(rank, world_size=world, tp=tp, pp=pp)
        dp, t, p = coordinates(rank, world_size=world, tp=tp, pp=pp)
        qdp, qt, qp = coordinates(choice.peer, world_size=world, tp=tp, pp=pp)
        assert choice.rule == "outside_groups"
        assert not (dp == qdp and p == qp), "same TP group"
        assert not (dp == qdp and t == qt), "same PP group"
        assert not (t == qt and p == qp), "same DP group"
        peers.append(choice.peer)
    assert sorted(peers) == list(range(world)), "every rank holds exactly one backup"


def test_peer_is_on_another_machine_when_a_node_holds_a_tp_group() -> None:
    nodes = {r: f"n{r // 8}" for r in range(32)}  # tp=8 per node, dp=4
    for rank in range(32):
        choice = choose_peer(rank, world_size=32, tp=8, pp=1, node_of=nodes)
        assert nodes[choice.peer] != nodes[rank]


def test_pure_data_parallel_falls_back_to_the_next_machine() -> None:
    nodes = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    choices = [choose_peer(r, world_size=6, node_of=nodes) for r in range(6)]
    assert {c.rule for c in choices} == {"next_machine"}
    assert all(nodes[c.peer] != nodes[r] for r, c in enumerate(choices))
    assert backup_source(2, world_size=6, node_of=nodes) == 0


def test_a_single_rank_has_no_peer() -> None:
    with pytest.raises(ValueError, match="two ranks"):
        choose_peer(0, world_size=1)
