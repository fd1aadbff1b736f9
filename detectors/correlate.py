"""Turn many anomalies about one fault into one incident.

A NaN shows up on every rank; a dead switch makes every node behind it
report network errors. Operators and the action engine want one incident
per fault: per job and kind, opened by the first anomaly and kept open
while related anomalies keep coming within `window_s` of event time. GPU
faults (hw_fault) are node-local, so they are kept per job *and node*; a
finding with no job is keyed by its node, so unrelated machines never merge.

Symptoms do not open incidents of their own while their cause is open: a
hang or slowdown of a job that already has an open hw_fault, network,
user_error, nan or sdc incident (same job, or a node in common) is that
incident's consequence; it is absorbed into it (listed in its
`anomaly_ids`) instead of triggering a second, wrong recovery.

A crash of unknown cause (a user_error with `evidence.cause == "unknown"`:
ranks exited and no detector said why within its grace, see
`detectors.logs`) is a symptom too when a cause incident of the same job is
open: the hardware, network, NaN or hang incident already says why it stopped.

A *transient* finding (`evidence.persistence == "transient"`: a fail-slow
episode that recovered before it persisted, see `detectors.persistence`)
is a counted node event, never an incident: nothing is evicted for it.
Neither is a `clock_skew` finding (a host's clock is off, see
`streams.worker.skew`): the host's operators fix its clock; its job is fine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from trainguard.detectors.persistence import TRANSIENT
from trainguard.schemas.ids import anomaly_id
from trainguard.schemas.kinds import CAUSES, CRASH_CAUSES, NODE_LOCAL, NOTED, SYMPTOMS  # columns of the kinds table
from trainguard.schemas.records import Anomaly, Incident


def _scope(anomaly: Anomaly) -> str:
    """What one incident is about: the job; for GPU faults, the job's node.

    Two GPUs failing on two machines are two faults (two evictions), even in
    one job; a NaN on 512 ranks, or a switch failure seen by many nodes, is one.
    """
    nodes = ",".join(anomaly.nodes)
    if anomaly.kind in NODE_LOCAL:
        return f"{anomaly.job}|{nodes}"
    return anomaly.job or "node:" + nodes


def _unexplained_crash(anomaly: Anomaly) -> bool:
    """A job that stopped with no cause its detector could name: explained by any open cause incident."""
    return anomaly.kind == "user_error" and anomaly.evidence.get("cause") == "unknown"


def incident_id(anomaly: Anomaly) -> str:
    """Deterministic: job, kind, scope and onset. The same fault seen again after a
    restart or a redelivery gets the same id, so the action journal's dedup holds.

    >>> a = Anomaly(ts=9.0, id="x", kind="nan", detector="nan", onset=5.0, job="j")
    >>> incident_id(a) == incident_id(Anomaly(ts=12.0, id="y", kind="nan", detector="nan", onset=5.0, job="j"))
    True
    """
    return anomaly_id("incident", anomaly.job, anomaly.kind, _scope(anomaly), f"{anomaly.onset:.3f}")


@dataclass
class _Open:
    incident: Incident
    last_ts: float
    nodes: set[str] = field(default_factory=set)
    ranks: set[int] = field(default_factory=set)
    ids: list[str] = field(default_factory=list)
    absorbed: int = 0


class IncidentCorrelator:
    """Merges anomalies into incidents; emits an incident once, when opened.

    >>> from trainguard.schemas.records import Anomaly
    >>> c = IncidentCorrelator(window_s=60)
    >>> a = Anomaly(ts=10.0, id="a", kind="nan", detector="nan", onset=10.0, job="j", ranks=[0])
    >>> b = Anomaly(ts=11.0, id="b", kind="nan", detector="nan", onset=11.0, job="j", ranks=[1])
    >>> [i.kind for i in c.add(a)], c.add(b)
    (['nan'], [])
    >>> h = Anomaly(ts=50.0, id="h", kind="hang", detector="hang", onset=12.0, job="j")
    >>> c.add(h), [i.anomaly_ids for i in c.open_incidents()]
    ([], [['a', 'b', 'h']])
    """

    def __init__(self, *, window_s: float = 300.0) -> None:
        self.window_s = window_s
        self._open: dict[tuple[str, str], _Open] = {}

    def add(self, anomaly: Anomaly) -> list[Incident]:
        """Absorb one anomaly; return the incident it opens, if it opens one."""
        self.expire(anomaly.ts)
        if anomaly.evidence.get("persistence") == TRANSIENT or anomaly.kind in NOTED:
            return []  # noted and counted by its detector; a blip that recovered is no fault to act on
        key = (_scope(anomaly), anomaly.kind)
        current = self._open.get(key)
        if current is None and anomaly.kind in SYMPTOMS:
            current = self._cause_of(anomaly, CAUSES)
        elif current is None and _unexplained_crash(anomaly):
            current = self._cause_of(anomaly, CRASH_CAUSES)
        if current is not None:
            current.last_ts = max(current.last_ts, anomaly.ts)
            current.nodes.update(anomaly.nodes)
            current.ranks.update(anomaly.ranks)
            if len(current.ids) < 100:
                current.ids.append(anomaly.id)
            else:
                current.absorbed += 1
            return []
        incident = Incident(
            ts=anomaly.ts,
            id=incident_id(anomaly),
            kind=anomaly.kind,
            job=anomaly.job,
            onset=anomaly.onset,
            detected_at=anomaly.ts,
            nodes=list(anomaly.nodes),
            ranks=list(anomaly.ranks),
            gpus=list(anomaly.gpus),
            group=anomaly.group,
            step=anomaly.step,
            anomaly_ids=[anomaly.id],
            evidence=dict(anomaly.evidence, detector=anomaly.detector, score=anomaly.score),
        )
        self._open[key] = _Open(incident, anomaly.ts, set(anomaly.nodes), set(anomaly.ranks), [anomaly.id])
        return [incident]

    def _cause_of(self, anomaly: Anomaly, causes: frozenset[str]) -> _Open | None:
        """An open incident of one of `causes` that explains this symptom, if any."""
        nodes = set(anomaly.nodes) | set(anomaly.evidence.get("job_nodes", ()))
        for (_, kind), current in sorted(self._open.items()):
            if kind not in causes:
                continue
            if (anomaly.job and current.incident.job == anomaly.job) or (nodes & current.nodes):
                return current
        return None

    def expire(self, ts: float) -> None:
        """Close incidents whose last anomaly is older than the window."""
        stale = [k for k, o in self._open.items() if ts - o.last_ts > self.window_s]
        for key in stale:
            del self._open[key]

    def open_incidents(self) -> list[Incident]:
        """Incidents still open, with every anomaly merged so far (for status displays)."""
        return [msgspec.structs.replace(o.incident, anomaly_ids=list(o.ids)) for o in self._open.values()]
