"""The node -> job join: which job a record of a node belongs to.

Node records (GPU samples, RDMA samples, kernel logs, node conditions) may
come from a DaemonSet agent that knows no job; training records, topologies
and job-stamped samples say which job runs on a node. Several parts keep
such a table, each fed from what it reads and bounded its own way (the
pipeline's index, the hardware and application-XID detectors, the
worker's fleet-wide table), and all join through these two functions, so
the rule is written once: a record's own job wins, else the table's, else
none; a table learns a node's job only when it changes. (The hang detector
keeps a node's job in its row of per-node facts, one lookup per sample, and
applies the same rule there.)

Pure: the tables are any mapping (plain dicts, `schemas.bounded.Bounded`),
so the detectors' pickled state keeps its shape.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping


def job_of(jobs: Mapping[str, str], node: str, job: str = "") -> str:
    """`job` when the record names one, else the job the table places `node` in, else "".

    >>> job_of({"n1": "j"}, "n1"), job_of({"n1": "j"}, "n1", "own"), job_of({}, "n9")
    ('j', 'own', '')
    """
    return job or jobs.get(node, "")


def learn(jobs: MutableMapping[str, str], node: str, job: str) -> bool:
    """Place `node` in `job`; True when that changed the table (a new node, or a node that moved).

    Unchanged entries are not written again: a bounded table keeps its order.

    >>> table: dict[str, str] = {}
    >>> learn(table, "n1", "j"), learn(table, "n1", "j"), learn(table, "n1", "k"), table
    (True, False, True, {'n1': 'k'})
    """
    if jobs.get(node) == job:
        return False
    jobs[node] = job
    return True
