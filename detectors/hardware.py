"""hw_fault: a GPU that must leave the fleet, found from one node sample.

Signals, each enough on its own (ByteRobust evicts on these without waiting
for the job to fail):

* a fatal XID (see `detectors.xid`; application XIDs never evict alone);
* growth of the cumulative double-bit ECC or uncorrectable-remap counters;
* a row-remap failure, a GPU flagged lost, or a GPU that vanished from a
  healthy sample (fallen off the bus);
* an NVLink error burst: at least `nvlink_burst` new errors within
  `nvlink_window_s`;
* a fatal XID in a kernel log line ("NVRM: Xid (PCI:...): 79"), for nodes
  where NVML cannot deliver XID events. One XID code fires once per node
  per cooldown, whichever source reported it first.

* a node condition that node-problem-detector set (`NodeCondition`,
  status True) whose type is in `node_conditions` (default: NPD's
  `KernelDeadlock` and `ReadonlyFilesystem`: the node cannot run a job), or
  whose message carries a fatal XID (a custom GPU condition). trainguard's
  own `TrainguardHealthy` is never evidence: it is what act wrote.

* a GPU recovery action other than none (NVML's GPU_RESET, NODE_REBOOT,
  DRAIN_P2P, DRAIN_AND_RESET; XID 154 announces it);
* an NVML call that timed out: the collector's read of the GPUs hangs,
  which is what a GPU falling off the bus or a wedged GSP looks like from
  user space. Such a sample is a hardware suspect naming the node, not a
  missing sample. Only trainguard's own NVML reads count: a dcgm-exporter
  that does not answer (`source="dcgm-exporter"`) is an exporter down, and
  leaves the node unobserved.

Counters are cumulative, so only growth counts; a counter that goes *down*
was reset (driver reload, GPU swap) and becomes the new baseline. Any other
sample with `nvml_ok=False` is *unobserved*: it changes nothing (never
"healthy"). Each (GPU, cause) fires once per `cooldown_s` of event time.
An anomaly's `ts` is the newest event time the detector has seen (the
stream's clock when it decided), never earlier than the sample's own
timestamp, which a host clock running behind may put before the fault.
"""

from __future__ import annotations

import re
from typing import Any

from trainguard.detectors.base import Detector
from trainguard.detectors.common import Bounded, SlotRows, Snapshottable, finding
from trainguard.detectors.dispatch import on
from trainguard.detectors.xid import classify, is_fatal
from trainguard.schemas.records import Anomaly, GpuStats, LogEvent, NodeCondition, NodeGpuSample

NVML_HUNG = re.compile(r"timed out|still hung|NVML_ERROR_TIMEOUT|Timeout", re.IGNORECASE)
NODE_CONDITIONS = ("KernelDeadlock", "ReadonlyFilesystem")
OWN_CONDITION = "TrainguardHealthy"
XID_LINE = re.compile(r"\bXid\b\s*(?:\((?:PCI:)?(?P<pci>[^)]*)\))?\s*:?\s*(?P<code>\d+)")


class _Gpu(Snapshottable):
    """Last counters of one GPU, plus its recent NVLink error growth."""

    __slots__ = ("dbe", "remap_unc", "nvlink", "failed", "lost", "bursts")

    def __init__(self, g: GpuStats) -> None:
        self.dbe = g.ecc_dbe
        self.remap_unc = g.remapped_uncorrectable
        self.nvlink = g.nvlink_errors
        self.failed = g.remap_failed
        self.lost = g.lost
        # (ts, growth) within the NVLink window, oldest first. A tuple, rebuilt on the rare change: an empty
        # deque per GPU cost 600 bytes and, at every snapshot, as much to pickle as the rest (issue 23).
        self.bursts: tuple[tuple[float, int], ...] = ()

    def restore(self) -> None:
        self.bursts = tuple(self.bursts)  # a deque before issue 23, a list before the mixin


class _NodeGpus(Snapshottable):
    """One node's row: the job its samples name, and its GPUs' counters by index.

    One map of rows, not a map of GPUs beside a map of jobs: every sample
    reads both, and at 12,500 nodes each map's lookup was its own cold cache
    lines (issue 23).
    """

    __slots__ = ("job", "gpus")

    def __init__(self) -> None:
        self.job = ""  # the node's job as its newest job-stamped sample names it ("": none yet)
        self.gpus: dict[int, _Gpu] = {}  # filled by its first readable sample


class _NodeRows:
    """Packs the rows for a snapshot: per node its job, its GPUs' indices and their state tuples, one block."""

    def __init__(self) -> None:
        self.gpus = SlotRows(_Gpu)

    def __reduce__(self) -> Any:
        return (_NodeRows, ())

    def pack(self, values: list[Any]) -> list[tuple[str, list[int], list[tuple[Any, ...]]]] | None:
        if values and set(map(type, values)) != {_NodeGpus}:
            return None
        out, pack = [], self.gpus.pack
        for row in values:
            states = pack(list(row.gpus.values()))
            if states is None:
                return None
            out.append((row.job, list(row.gpus), states))
        return out

    def unpack(self, packed: list[tuple[str, list[int], list[tuple[Any, ...]]]]) -> list[_NodeGpus]:
        rows = []
        for job, indices, states in packed:
            row = _NodeGpus()
            row.job, row.gpus = job, dict(zip(indices, self.gpus.unpack(states)))  # type: ignore[arg-type]
            rows.append(row)
        return rows


class HardwareDetector(Detector):
    """Flags GPUs with fatal XIDs, ECC/remap failures, loss or NVLink bursts.

    >>> from trainguard.schemas.records import NodeGpuSample, GpuStats, XidEvent
    >>> d = HardwareDetector()
    >>> d.observe(NodeGpuSample(ts=1.0, node="n0", gpus=[GpuStats(index=0)], xids=[XidEvent(gpu=0, code=13, ts=1.0)]))
    []
    >>> [a.gpus for a in d.observe(NodeGpuSample(ts=2.0, node="n0", xids=[XidEvent(gpu=0, code=79, ts=1.5)]))]
    [['n0:0']]
    """

    state_is_a_tree = True  # checked by detectors.checks (check_state_is_a_tree)

    def __init__(
        self,
        *,
        instance: str = "hw_fault",
        nvlink_burst: int = 20,
        nvlink_window_s: float = 120.0,
        cooldown_s: float = 300.0,
        extra_fatal_xids: list[int] | None = None,
        node_conditions: list[str] | None = None,
        max_gpus: int = 200_000,
    ) -> None:
        super().__init__(instance=instance)
        self.nvlink_burst = nvlink_burst
        self.nvlink_window_s = nvlink_window_s
        self.cooldown_s = cooldown_s
        self.extra_fatal_xids = sorted(extra_fatal_xids or [])
        self._extra = set(self.extra_fatal_xids)  # a set, not a frozenset: detectors.state_tree
        self.node_conditions = list(NODE_CONDITIONS if node_conditions is None else node_conditions)
        self._conditions = set(self.node_conditions) - {OWN_CONDITION}
        self._nodes: Bounded[str, _NodeGpus] = Bounded(max(1, max_gpus // 8), _NodeRows())
        self._fired: Bounded[tuple[str, int, str], float] = Bounded(max_gpus)
        self._now = float("-inf")

    def __setstate__(self, state: dict[str, Any]) -> None:
        """As pickled; a snapshot from before the rows holds node -> GPUs and node -> job, joined here."""
        vars(self).update(state)
        jobs = vars(self).pop("_node_job", None)
        if jobs is None:
            return
        gpus: Bounded[str, dict[int, _Gpu]] = self._nodes  # type: ignore[assignment]
        self._nodes = Bounded(max(gpus.cap, jobs.cap), _NodeRows())
        for node in [*gpus, *jobs]:
            if node not in self._nodes:
                row = self._nodes[node] = _NodeGpus()
                row.job, row.gpus = jobs.get(node, ""), gpus.get(node, {})

    def _row(self, node: str) -> _NodeGpus:
        row = self._nodes.get(node)
        if row is None:
            self._nodes[node] = row = _NodeGpus()
        return row

    def _job_of(self, node: str, job: str) -> str:
        """The record's own job, else the one the node's samples named, else "" (as `schemas.node_jobs`)."""
        if job:
            return job
        row = self._nodes.get(node)
        return row.job if row is not None else ""

    @on(LogEvent)
    def _log(self, record: LogEvent) -> list[Anomaly]:
        if record.ts > self._now:
            self._now = record.ts
        return self._xid_line(record)

    @on(NodeCondition)
    def _condition(self, record: NodeCondition) -> list[Anomaly]:
        """A problem condition node-problem-detector set: fatal by type, or by the XID its message names."""
        if record.ts > self._now:
            self._now = record.ts
        if record.status != "True" or record.condition == OWN_CONDITION:
            return []
        at = record.since if 0 < record.since <= record.ts else record.ts
        match = XID_LINE.search(record.message)
        if match and is_fatal(int(match.group("code")), self._extra, record.message):
            code = int(match.group("code"))
            cause = {"gpu": -1, "cause": "xid", "code": code, "meaning": classify(code, record.message).meaning,
                     "at": at, "pci": match.group("pci") or "", "source": f"node condition {record.condition}"}
        elif record.condition in self._conditions:
            cause = {"gpu": -1, "cause": "node_condition", "condition": record.condition, "reason": record.reason,
                     "message": record.message[:300], "at": at, "source": record.source}
        else:
            return []
        job = self._job_of(record.node, record.job)
        return self._report(NodeGpuSample(ts=record.ts, node=record.node, job=job), [cause])

    @on(NodeGpuSample)
    def _sample(self, record: NodeGpuSample) -> list[Anomaly]:
        if record.ts > self._now:
            self._now = record.ts
        row = self._nodes.get(record.node)
        if record.job:
            if row is None:
                row = self._row(record.node)
            if row.job != record.job:
                row.job = record.job
        if not record.nvml_ok:
            if not record.source and NVML_HUNG.search(record.error):
                return self._report(record, [{"gpu": -1, "cause": "nvml_timeout", "error": record.error[:200]}])
            return []
        if not record.xids and row is not None and self._quiet(record, row):
            return []
        causes: list[dict[str, Any]] = []
        for xid in record.xids:
            if is_fatal(xid.code, self._extra, xid.message):
                causes.append({"gpu": xid.gpu, "cause": "xid", "code": xid.code,
                               "meaning": classify(xid.code, xid.message).meaning, "at": xid.ts})
        gpus = (row or self._row(record.node)).gpus
        for g in record.gpus:
            causes.extend(self._counters(gpus, g, record.ts))
        if record.gpus and len(gpus) > len(record.gpus):
            present = {g.index for g in record.gpus}
            for index, state in gpus.items():
                if index not in present and not state.lost:
                    state.lost = True
                    causes.append({"gpu": index, "cause": "gpu_missing"})
        return self._report(record, causes)

    def _quiet(self, record: NodeGpuSample, row: _NodeGpus | None = None) -> bool:
        """The common sample, in one pass: the node's GPUs all known and all present once, no counter grown, no
        flag newly raised, no NVLink burst being counted. Such a sample finds nothing and only carries the
        counters forward, which this does; anything else (False) takes the GPU-by-GPU path (`_counters`),
        which gives the same answer: this only skips its work. `row`: the node's, when the caller has it."""
        row = row or self._nodes.get(record.node)
        gpus, sample = (row.gpus if row is not None else None), record.gpus
        if gpus is None or len(gpus) != len(sample):
            return False
        states = []
        for g in sample:
            s = gpus.get(g.index)
            if (s is None or s.bursts or g.recovery_action or g.nvlink_errors > s.nvlink or g.ecc_dbe > s.dbe
                    or g.remapped_uncorrectable > s.remap_unc or (g.remap_failed and not s.failed)
                    or (g.lost and not s.lost)):
                return False
            states.append(s)
        if len({g.index for g in sample}) < len(sample):
            return False  # a GPU listed twice: the GPU-by-GPU path reads it in order
        for g, s in zip(sample, states):
            s.dbe, s.remap_unc, s.nvlink = g.ecc_dbe, g.remapped_uncorrectable, g.nvlink_errors
            s.failed, s.lost = g.remap_failed, g.lost
        return True

    def _xid_line(self, log: LogEvent) -> list[Anomaly]:
        """A kernel "NVRM: Xid (PCI:...): 79, ..." line: the XID source when NVML cannot report."""
        match = XID_LINE.search(log.message)
        if match is None or not is_fatal(int(match.group("code")), self._extra, log.message):
            return []
        code = int(match.group("code"))
        cause = {"gpu": -1, "cause": "xid", "code": code, "meaning": classify(code, log.message).meaning, "at": log.ts,
                 "pci": match.group("pci") or "", "source": "kernel log"}
        job = self._job_of(log.node, log.job)
        return self._report(NodeGpuSample(ts=log.ts, node=log.node, job=job), [cause])

    def _counters(self, gpus: dict[int, _Gpu], g: GpuStats, ts: float) -> list[dict[str, Any]]:
        state = gpus.get(g.index)
        if state is None:
            gpus[g.index] = state = _Gpu(g)
            out = []
            if g.lost:
                out.append({"gpu": g.index, "cause": "gpu_lost"})
            if g.remap_failed:
                out.append({"gpu": g.index, "cause": "remap_failed"})
            if g.recovery_action:
                out.append({"gpu": g.index, "cause": "recovery_action", "action": g.recovery_action})
            return out
        out = []
        if g.ecc_dbe > state.dbe:
            out.append({"gpu": g.index, "cause": "ecc_dbe_growth", "from": state.dbe, "to": g.ecc_dbe})
        if g.remapped_uncorrectable > state.remap_unc:
            out.append({"gpu": g.index, "cause": "remap_uncorrectable_growth",
                        "from": state.remap_unc, "to": g.remapped_uncorrectable})
        if g.remap_failed and not state.failed:
            out.append({"gpu": g.index, "cause": "remap_failed"})
        if g.lost and not state.lost:
            out.append({"gpu": g.index, "cause": "gpu_lost"})
        if g.recovery_action:
            out.append({"gpu": g.index, "cause": "recovery_action", "action": g.recovery_action})
        growth = g.nvlink_errors - state.nvlink if g.nvlink_errors >= state.nvlink else 0
        if growth > 0 or state.bursts:
            burst = self._nvlink_burst(state, ts, growth)
            if burst >= self.nvlink_burst:
                out.append({"gpu": g.index, "cause": "nvlink_burst", "errors": burst,
                            "window_s": self.nvlink_window_s})
                state.bursts = ()
        # A counter going down was reset: the new value is the new baseline.
        state.dbe, state.remap_unc, state.nvlink = g.ecc_dbe, g.remapped_uncorrectable, g.nvlink_errors
        state.failed, state.lost = g.remap_failed, g.lost
        return out

    def _nvlink_burst(self, state: _Gpu, ts: float, growth: int) -> int:
        bursts = state.bursts + ((ts, growth),) if growth else state.bursts
        expired = 0
        while expired < len(bursts) and ts - bursts[expired][0] > self.nvlink_window_s:
            expired += 1
        state.bursts = bursts[expired:]
        return sum(n for _, n in state.bursts)

    def _report(self, sample: NodeGpuSample, causes: list[dict[str, Any]]) -> list[Anomaly]:
        fresh = []
        for c in causes:
            gpu = -1 if c["cause"] == "xid" else c["gpu"]  # one XID code per node, whichever source saw it
            key = (sample.node, gpu, f"{c['cause']}:{c.get('code', c.get('condition', ''))}")
            last = self._fired.get(key)
            if last is not None and sample.ts - last < self.cooldown_s:
                continue
            self._fired[key] = sample.ts
            fresh.append(c)
        if not fresh:
            return []
        onset = min(float(c.get("at", sample.ts)) for c in fresh)
        gpus = sorted({f"{sample.node}:{c['gpu']}" for c in fresh if c["gpu"] >= 0})
        return [finding(self.instance, "hw_fault", ts=max(self._now, sample.ts), onset=min(onset, sample.ts),
                        job=sample.job,
                        nodes=[sample.node], gpus=gpus, key=(sample.node, tuple(gpus)),
                        evidence={"node": sample.node, "findings": fresh})]

    def state_size(self) -> int:
        gpus = sum(len(r.gpus) + sum(len(s.bursts) for s in r.gpus.values()) for r in self._nodes.values())
        return len(self._nodes) + gpus + len(self._fired)
