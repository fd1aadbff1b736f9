"""Application XIDs on every node of a job at once: the job's own code crashed, not its machines.

An XID 13, 31 or 43 (see `detectors.xid`: graphics exception, page fault,
GPU stopped processing) is what the driver logs when a *process's* CUDA
context faults: an illegal memory access or a device-side assert in a
kernel. One such XID alone says little (NVIDIA's catalog: restart the
application), and the hardware detector never evicts on it. But the same
user kernel runs on every rank, so a bug in it faults every node of the job
within the same few seconds, while a machine fault shows on one node (the
other ranks then fail in NCCL, which is why the log lines of such a crash
read as infrastructure and the log rule alone stays silent). Hence the
rule: application XIDs on *every* node of a job with at least two nodes
(the job's nodes are what its `JobTopology` names), their own timestamps
within `window_s`, and no fatal XID on any of those nodes within
`fatal_guard_s`: a user error. A fatal XID nearby (one node's XID 79 while
the others report 43 as their kernels die) leaves the verdict to the
hardware detector, which evicts that node.

Background application XIDs (a stray process on one node at about one per
node-hour) meet on every node of a two-node job within a 20 s window about
once in five days, and practically never on a larger job.
"""

from __future__ import annotations

from typing import Any

from trainguard.detectors.common import Bounded
from trainguard.detectors.xid import classify, is_fatal
from trainguard.schemas import node_jobs
from trainguard.schemas.records import JobTopology, NodeGpuSample


class JobWideXids:
    """Per-job record of the newest application and fatal XID on each node; `check` says when a crash is the job's."""

    def __init__(self, *, window_s: float = 20.0, fatal_guard_s: float = 120.0, max_jobs: int = 10_000) -> None:
        self.window_s = window_s
        self.fatal_guard_s = fatal_guard_s
        self._nodes: Bounded[str, list[str]] = Bounded(max_jobs)  # job -> its nodes (from the topology)
        self._job_of: Bounded[str, str] = Bounded(max_jobs * 64)  # node -> job
        self._app: Bounded[str, dict[str, tuple[float, int]]] = Bounded(max_jobs)  # job -> node -> (ts, code)
        self._fatal: Bounded[str, float] = Bounded(max_jobs)  # job -> newest fatal XID time

    def topology(self, record: JobTopology) -> None:
        """The job's nodes: what "every node of the job" means."""
        nodes = sorted(set(record.rank_nodes.values()))
        if not nodes:
            return
        self._nodes[record.job] = nodes
        for node in nodes:
            node_jobs.learn(self._job_of, node, record.job)
        self._app.pop(record.job, None)  # a new layout: XIDs of the old one do not count towards it

    def job_of(self, node: str) -> str:
        """The job the topology placed `node` in ("" when none did)."""
        return node_jobs.job_of(self._job_of, node)

    def sample(self, record: NodeGpuSample) -> dict[str, Any] | None:
        """Note this sample's XIDs; the evidence of a job-wide application crash when this one completes it."""
        if not record.xids:
            return None
        job = node_jobs.job_of(self._job_of, record.node, record.job)
        if not job:
            return None
        seen = self._app.get(job)
        for xid in record.xids:
            if is_fatal(xid.code, message=xid.message):
                self._fatal[job] = max(xid.ts, self._fatal.get(job, xid.ts))
            elif classify(xid.code, xid.message).severity == "application":
                if seen is None:
                    self._app[job] = seen = {}
                seen[record.node] = (xid.ts, xid.code)
        return self._check(job, record.ts) if seen else None

    def _check(self, job: str, now: float) -> dict[str, Any] | None:
        nodes, seen = self._nodes.get(job), self._app.get(job, {})
        if not nodes or len(nodes) < 2 or any(n not in seen for n in nodes):
            return None
        times = [seen[n][0] for n in nodes]
        fatal = self._fatal.get(job)
        if max(times) - min(times) > self.window_s:
            return None
        if fatal is not None and abs(fatal - max(times)) <= self.fatal_guard_s:
            return None
        del self._app[job]  # reported: the next crash needs XIDs of its own
        codes = sorted({seen[n][1] for n in nodes})
        return {"nodes": nodes, "codes": codes, "onset": min(times), "spread_s": round(max(times) - min(times), 3),
                "match": f"application XID {'/'.join(map(str, codes))} on all {len(nodes)} nodes at once"}

    def state_size(self) -> int:
        return len(self._nodes) + len(self._job_of) + sum(len(v) for v in self._app.values()) + len(self._fatal)
