"""Route records to detectors and anomalies to the correlator.

`DetectionPipeline` is the one object the worker, the backtest and the tests
drive: `process(record)` returns (anomalies, incidents). Each record goes
once, by its type, to the handlers the detectors declared for that type
(`@on(...)`, see `detectors.dispatch`): the table type -> bound handlers is
built when the pipeline is, and rebuilt when a snapshot is restored. It keeps the
newest event time seen and ticks time-based detectors as event time moves,
at most once per `tick_every_s` of event time, so a hang fires even though
the hung job itself sends nothing.

Offline (backtest) the file is in event-time order, so the newest record
is the time. Live, records of several partitions interleave and one may be
far ahead of another; the worker then sets `time_limit` to its guarded
watermark (streams.worker.watermark) so that no record moves time past what every
partition has reached, and calls `advance` as that watermark moves.

It also joins nodes to jobs. A node agent started by a DaemonSet does not
know which job runs on its machine, so its GPU, RDMA and log records come
with `job=""`. The pipeline learns each node's current job from the job's
`JobTopology` and from records that carry both (steps, heartbeats, phases,
stacks sent by `trainguard run` agents), and stamps that job on jobless
node records before any detector sees them: a node-level fault on a node
running job J is an incident of J. A node in no job keeps `job=""`; its
incidents still name the node, so it can be cordoned.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from trainguard.detectors.base import Detector
from trainguard.detectors.common import Snapshottable
from trainguard.detectors.correlate import IncidentCorrelator
from trainguard.detectors.dispatch import Handler, bind
from trainguard.detectors.registry import build
from trainguard.detectors.settings import DetectorSettings
from trainguard.schemas import node_jobs
from trainguard.schemas.records import (
    Anomaly,
    CustomMetric,
    Heartbeat,
    Incident,
    JobTopology,
    LogEvent,
    NodeCondition,
    NodeGpuSample,
    PhaseChange,
    RdmaSample,
    Record,
    StackSample,
    TrainingStep,
)

# Records that name their job and node: they tell which job a node runs.
_TEACH_JOB = (TrainingStep, Heartbeat, PhaseChange, StackSample)
# Node records a DaemonSet agent may send without a job.
_NEED_JOB = (NodeGpuSample, RdmaSample, LogEvent, NodeCondition, CustomMetric)


class NodeJobIndex:
    """Which job each node runs now, learned from the training stream.

    >>> idx = NodeJobIndex()
    >>> idx.learn(JobTopology(ts=1.0, job="j", world_size=2, rank_nodes={0: "n0", 1: "n1"}))
    >>> idx.job_of("n1"), idx.job_of("n9")
    ('j', '')
    """

    def __init__(self) -> None:
        self.jobs: dict[str, str] = {}
        self.changes: list[tuple[str, str]] = []  # (node, job) learned since the owner last drained them

    def learn(self, record: Record) -> None:
        """Update the index from a record that names job and node(s)."""
        if isinstance(record, JobTopology):
            for node in record.rank_nodes.values():
                if node and node_jobs.learn(self.jobs, node, record.job):
                    self.changes.append((node, record.job))
            return
        node, job = getattr(record, "node", ""), getattr(record, "job", "")
        if node and job and node_jobs.learn(self.jobs, node, job):
            self.changes.append((node, job))

    def drain(self) -> list[tuple[str, str]]:
        """The changes since the last call (the worker shares them with the other workers)."""
        changes, self.changes = self.changes, []
        return changes

    def job_of(self, node: str) -> str:
        """The node's current job, or "" when it runs none we know of."""
        return node_jobs.job_of(self.jobs, node)

    def stamp(self, record: Record) -> Record:
        """`record` with its node's job filled in, when it has none."""
        job = "" if record.job else node_jobs.job_of(self.jobs, record.node)  # type: ignore[attr-defined]
        return msgspec.structs.replace(record, job=job) if job else record


class DetectionPipeline(Snapshottable):
    """Detectors plus correlator, driven by event time only.

    Building one checks every detector's handler declarations: a detector
    with none, or one for a record type no pipeline is fed, raises
    `detectors.dispatch.HandlerError` here rather than never firing.
    """

    # Derived from the detectors or constant: rebuilt on restore, never snapshotted.
    transient = ("_route", "_tickers", "_learns", "_stamps")

    def __init__(
        self,
        detectors: Iterable[Detector],
        correlator: IncidentCorrelator | None = None,
        *,
        tick_every_s: float = 1.0,
    ) -> None:
        self.detectors = list(detectors)
        self.correlator = correlator or IncidentCorrelator()
        self.tick_every_s = tick_every_s
        self.watermark = float("-inf")
        self.time_limit = float("inf")  # the worker's guarded watermark; unbounded offline
        self._last_tick = float("-inf")
        self.nodes = NodeJobIndex()
        self.restore()

    def restore(self) -> None:
        """(Re)build the routing table (record type -> bound handlers, in detector order), tickers, type sets."""
        self._learns = frozenset((*_TEACH_JOB, JobTopology))
        self._stamps = frozenset(_NEED_JOB)
        self._route: dict[type, list[Handler]] = {}
        for det in self.detectors:
            for record_type, bound in bind(det).items():
                self._route.setdefault(record_type, []).extend(bound)
        self._tickers = [d for d in self.detectors if type(d).tick is not Detector.tick]

    def is_a_tree(self) -> bool:
        """Every detector declares its state a tree (`Detector.state_is_a_tree`), so a snapshot may skip the memo.

        The pipeline's own state (the correlator, the node->job index, the clocks) is a tree: trainguard's tests
        check it with every built-in detector (`detectors.state_tree.shared_mutables`).
        """
        return all(type(d).state_is_a_tree for d in self.detectors)

    @classmethod
    def from_settings(cls, settings: DetectorSettings) -> DetectionPipeline:
        """Build the configured detector instances (entry-point lookup)."""
        dets = [build(s.type, s.instance, s.params) for s in settings.instances if s.enabled]
        return cls(dets, IncidentCorrelator(window_s=settings.correlator.window_s))

    def process(self, record: Record) -> tuple[list[Anomaly], list[Incident]]:
        """Feed one record; return new anomalies and newly opened incidents."""
        found = self.process_all((record,))
        return found[0] if found else ([], [])

    def process_all(self, records: Iterable[Record]) -> list[tuple[list[Anomaly], list[Incident]]]:
        """Feed records in order; the (anomalies, incidents) of those that found any, in order.

        Each record is routed to the handlers declared for its type, time-based detectors tick at most
        once per `tick_every_s` of event time, and new anomalies are correlated. The worker releases
        records by the thousand (`streams.worker.processor`) and the backtest reads them by the hundred:
        one call per batch, with the routing table, the node index and the tick bound to locals once,
        saves a method call and a result tuple per record on every record's path (`process` is a batch of one).
        """
        found_by: list[tuple[list[Anomaly], list[Incident]]] = []
        route, nodes, learns, stamps = self._route, self.nodes, self._learns, self._stamps
        jobs, limit, every = nodes.jobs, self.time_limit, self.tick_every_s
        for record in records:
            ts = record.ts
            if ts > self.watermark:
                self.watermark = ts if ts < limit else max(self.watermark, limit)
            cls = record.__class__
            if cls in learns:
                # Nearly every step and heartbeat names a node already placed in its job: one lookup, no call.
                if cls is JobTopology or jobs.get(record.node) != record.job:  # type: ignore[attr-defined]
                    nodes.learn(record)
            elif cls in stamps and not record.job:  # type: ignore[attr-defined]
                record = nodes.stamp(record)
            anomalies: list[Anomaly] = []
            for handle in route.get(cls, ()):
                found = handle(record)
                if found:
                    anomalies.extend(found)
            if self.watermark - self._last_tick >= every:
                anomalies.extend(self._tick(self.watermark))
            if anomalies:
                found_by.append((anomalies, self._correlate(anomalies)))
        return found_by

    def advance(self, ts: float) -> tuple[list[Anomaly], list[Incident]]:
        """Move event time forward with no record (e.g. at the end of a replay)."""
        self.watermark = max(self.watermark, ts)
        anomalies = self._tick(self.watermark)
        return anomalies, self._correlate(anomalies)

    def _tick(self, ts: float) -> list[Anomaly]:
        self._last_tick = ts
        out: list[Anomaly] = []
        for det in self._tickers:
            out.extend(det.tick(ts))
        return out

    def _correlate(self, anomalies: list[Anomaly]) -> list[Incident]:
        incidents: list[Incident] = []
        for anomaly in anomalies:
            incidents.extend(self.correlator.add(anomaly))
        return incidents
