"""A job's parallel layout: which ranks form which groups, on which nodes.

Ranks follow the Megatron order: tensor-parallel fastest, then data-parallel,
then pipeline (`rank = (pp_idx * dp + dp_idx) * tp + tp_idx`). When the
localisation names several suspects and none is certain, ByteRobust
over-evicts the *smallest parallel group* that contains them all: a few
healthy machines are cheap next to another failed restart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from trainguard.schemas.records import JobTopology


@dataclass(frozen=True)
class Group:
    """One parallel group: its kind ("node", "tp", "dp", "pp", "job") and members."""

    kind: str
    ranks: frozenset[int]
    nodes: frozenset[str]


@dataclass
class Topology:
    """Rank/node maps and parallel groups of one job (immutable once built: groups are cached).

    >>> t = Topology.from_record(JobTopology(ts=0, job="j", world_size=4, tp=2, dp=2,
    ...     rank_nodes={0: "a", 1: "a", 2: "b", 3: "b"}))
    >>> t.smallest_group(ranks={0, 1}).kind
    'node'
    >>> t.smallest_group(ranks={0, 2}).kind
    'dp'
    >>> sorted(t.smallest_group(nodes={"a", "b"}).nodes)
    ['a', 'b']
    """

    job: str
    world_size: int
    tp: int = 1
    pp: int = 1
    dp: int = 1
    rank_nodes: dict[int, str] = field(default_factory=dict)

    @classmethod
    def from_record(cls, record: JobTopology) -> Topology:
        """Build from a `JobTopology` announcement."""
        return cls(record.job, record.world_size, record.tp, record.pp, record.dp, dict(record.rank_nodes))

    @cached_property
    def nodes(self) -> list[str]:
        """Every node of the job, in rank order, without repeats."""
        return list(dict.fromkeys(self.rank_nodes[r] for r in sorted(self.rank_nodes)))

    def ranks_of(self, nodes: set[str]) -> set[int]:
        """The ranks that run on any of `nodes`."""
        return {r for r, n in self.rank_nodes.items() if n in nodes}

    def nodes_of(self, ranks: set[int]) -> set[str]:
        """The nodes that run any of `ranks` (unknown ranks are ignored)."""
        return {self.rank_nodes[r] for r in ranks if r in self.rank_nodes}

    def groups(self) -> list[Group]:
        """Every node, tp, dp and pp group, and the whole job (computed once)."""
        return self._groups

    @cached_property
    def _groups(self) -> list[Group]:
        by_node: dict[str, set[int]] = {}
        for rank, node in self.rank_nodes.items():
            by_node.setdefault(node, set()).add(rank)
        out = [Group("node", frozenset(by_node[n]), frozenset({n})) for n in self.nodes]
        for kind in ("tp", "dp", "pp"):
            buckets: dict[tuple[int, int], set[int]] = {}
            for rank in range(self.world_size):
                tp_i, dp_i, pp_i = self._coords(rank)
                key = {"tp": (dp_i, pp_i), "dp": (tp_i, pp_i), "pp": (tp_i, dp_i)}[kind]
                buckets.setdefault(key, set()).add(rank)
            out.extend(Group(kind, frozenset(rs), frozenset(self.nodes_of(rs))) for rs in buckets.values())
        everyone = frozenset(range(self.world_size))
        out.append(Group("job", everyone, frozenset(self.nodes_of(set(everyone)))))
        return out

    def smallest_group(self, *, ranks: set[int] | None = None, nodes: set[str] | None = None) -> Group:
        """The group with the fewest nodes that contains every suspect."""
        suspects = set(ranks or ()) | self.ranks_of(set(nodes or ()))
        suspect_nodes = set(nodes or ()) | self.nodes_of(suspects)
        fitting = [g for g in self.groups() if suspects <= g.ranks and suspect_nodes <= g.nodes]
        order = {"node": 0, "tp": 1, "pp": 2, "dp": 3, "job": 4}
        return min(fitting, key=lambda g: (len(g.nodes), len(g.ranks), order[g.kind]))

    def dp_machines(self) -> list[str]:
        """Nodes in data-parallel order: what a replay regroups."""
        return self.nodes

    def _coords(self, rank: int) -> tuple[int, int, int]:
        tp_i = rank % self.tp
        dp_i = (rank // self.tp) % self.dp
        pp_i = rank // (self.tp * self.dp)
        return tp_i, dp_i, pp_i


def job_members(nodes: list[str], replacements: list[tuple[str, str]], *, gone: set[str],
                ready_spares: set[str]) -> list[str]:
    """The nodes a job runs on now: its (possibly stale) topology with every swap applied in order.

    Each node appears at most once and every swapped-in spare is included; a node
    evicted without a spare, or back in the standby pool, is no member. Applying a
    swap is idempotent, so a topology that already lists a spare changes nothing.

    >>> job_members(["n1", "n2", "n3", "n4"], [("n2", "s0"), ("n4", "n2")], gone={"n4"}, ready_spares=set())
    ['n1', 's0', 'n3', 'n2']
    >>> job_members(["n1", "s0", "n3", "n2"], [("n2", "s0"), ("n4", "n2")], gone={"n4"}, ready_spares=set())
    ['n1', 's0', 'n3', 'n2']
    """
    members = list(dict.fromkeys(nodes))
    for old, new in replacements:
        if old in members:
            members[members.index(old)] = new
            members = list(dict.fromkeys(members))
        elif new not in members:
            members.append(new)
    return [n for n in members if n not in ready_spares and n not in gone]
