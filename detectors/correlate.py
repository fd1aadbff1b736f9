"""Turn many anomalies about one fault into one incident.

A NaN shows up on every rank; a dead switch makes every node behind it
report network errors. Operators and the action engine want one incident
per fault: per job and kind, opened by the first anomaly and kept open
while related anomalies keep coming within `window_s` of event time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from detectors.base import anomaly_id
from schemas.records import Anomaly, Incident


@dataclass
class _Open:
    incident: Incident
    last_ts: float
    nodes: set[str] = field(default_factory=set)
    ranks: set[int] = field(default_factory=set)


class IncidentCorrelator:
    """Merges anomalies into incidents; emits an incident once, when opened.

    >>> from schemas.records import Anomaly
    >>> c = IncidentCorrelator(window_s=60)
    >>> a = Anomaly(ts=10.0, id="a", kind="nan", detector="nan", onset=10.0, job="j", ranks=[0])
    >>> b = Anomaly(ts=11.0, id="b", kind="nan", detector="nan", onset=11.0, job="j", ranks=[1])
    >>> [i.kind for i in c.add(a)], c.add(b)
    (['nan'], [])
    """

    def __init__(self, *, window_s: float = 300.0) -> None:
        self.window_s = window_s
        self._open: dict[tuple[str, str], _Open] = {}

    def add(self, anomaly: Anomaly) -> list[Incident]:
        """Absorb one anomaly; return the incident it opens, if it opens one."""
        self.expire(anomaly.ts)
        key = (anomaly.job, anomaly.kind)
        current = self._open.get(key)
        if current is not None:
            current.last_ts = anomaly.ts
            current.nodes.update(anomaly.nodes)
            current.ranks.update(anomaly.ranks)
            return []
        incident = Incident(
            ts=anomaly.ts,
            id=anomaly_id("incident", anomaly.job, anomaly.kind, anomaly.id),
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
            evidence=dict(anomaly.evidence, detector=anomaly.detector),
        )
        self._open[key] = _Open(incident, anomaly.ts, set(anomaly.nodes), set(anomaly.ranks))
        return [incident]

    def expire(self, ts: float) -> None:
        """Close incidents whose last anomaly is older than the window."""
        stale = [k for k, o in self._open.items() if ts - o.last_ts > self.window_s]
        for key in stale:
            del self._open[key]

    def open_incidents(self) -> list[Incident]:
        """Incidents still open (for status displays)."""
        return [o.incident for o in self._open.values()]
