"""The fleet around the jobs: several jobs, idle nodes, and the mess of real collection.

Each job is simulated on its own (`Simulation`) over its own lifetime and
nodes; this module merges them into one stream and adds what a real fleet
adds on the way to Kafka:

* idle nodes, and job nodes before their job starts or after it ends,
  keep sending hardware samples with no job (job churn frees nodes);
* every host's clock is off by a fixed offset of up to `clock_skew_s`,
  so records carry host time, not true time;
* records arrive up to `delivery_jitter_s` late, so hosts interleave out
  of event-time order (each host's own records stay in order, as one
  collector's Kafka producer keeps them);
* a DaemonSet collector does not know the job: GPU and RDMA samples lose
  their `job` field.

Labels stay in true time: a detector must cope with skew, not learn it.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterable, Iterator

import msgspec

from trainguard.lab.telemetry_sim.hardware import NodeHardware
from trainguard.lab.telemetry_sim.scenario import Scenario
from trainguard.schemas.records import NodeGpuSample, RdmaSample, Record


def idle_hardware(sc: Scenario, busy: dict[str, list[tuple[float, float]]], names: list[str]) -> Iterator[Record]:
    """Hardware samples of every node outside the windows a job holds it, in time order."""
    bg, rates = sc.background, sc.rates
    hw = [NodeHardware(name=n, index=-1, job="", gpus=8, ports=4, seed=sc.seed * 1000 + 500 + i,
                       benign_xids_per_h=bg.benign_xids_per_node_h, rdma_errors_per_port_h=bg.rdma_errors_per_port_h)
          for i, n in enumerate(names)]
    end = sc.start_ts + sc.duration_s
    every = min(rates.gpu_sample_s, rates.rdma_sample_s)
    tick = sc.start_ts
    while tick < end:
        for i, node in enumerate(hw):
            ts = tick + every * i / max(1, len(hw))
            if ts >= end or any(a <= ts < b for a, b in busy.get(node.name, ())):
                continue
            yield node.gpu_sample(ts, every, "down", [])
            yield node.rdma_sample(ts + 0.001, every, "down", [])
        tick += every


class FleetMess:
    """Host clock offsets, delivery jitter and jobless hardware, applied to a true-time stream."""

    def __init__(self, sc: Scenario) -> None:
        self.fleet = sc.fleet
        self._rng = random.Random(sc.seed * 31 + 5)
        self._offsets: dict[str, float] = {}
        self._last_arrival: dict[str, float] = {}

    def offset(self, host: str) -> float:
        """The host's fixed clock error (drawn on first sight)."""
        off = self._offsets.get(host)
        if off is None:
            skew = self.fleet.clock_skew_s
            self._offsets[host] = off = self._rng.uniform(-skew, skew) if skew else 0.0
        return off

    def apply(self, records: Iterable[Record]) -> Iterator[Record]:
        """The records as the stream sees them, in arrival order."""
        jitter = self.fleet.delivery_jitter_s
        heap: list[tuple[float, int, Record]] = []
        seq = 0
        for rec in records:
            host = _host(rec)
            out = self._restamp(rec, host)
            arrival = rec.ts + (self._rng.uniform(0.0, jitter) if jitter else 0.0)
            arrival = max(arrival, self._last_arrival.get(host, -math.inf))  # one producer keeps its order
            self._last_arrival[host] = arrival
            seq += 1
            heapq.heappush(heap, (arrival, seq, out))
            while heap and heap[0][0] <= rec.ts:
                yield heapq.heappop(heap)[2]
        while heap:
            yield heapq.heappop(heap)[2]

    def _restamp(self, rec: Record, host: str) -> Record:
        off = self.offset(host) if host else 0.0
        changes: dict[str, object] = {}
        if off:
            changes["ts"] = rec.ts + off
        if isinstance(rec, NodeGpuSample):
            if off and rec.xids:
                changes["xids"] = [msgspec.structs.replace(x, ts=x.ts + off) for x in rec.xids]
            if self.fleet.jobless_hardware and rec.job:
                changes["job"] = ""
        elif isinstance(rec, RdmaSample) and self.fleet.jobless_hardware and rec.job:
            changes["job"] = ""
        return msgspec.structs.replace(rec, **changes) if changes else rec  # type: ignore[arg-type]


def _host(rec: Record) -> str:
    """The machine whose clock stamped a record ("" for job-level records from the launcher)."""
    node = getattr(rec, "node", "")
    return node if isinstance(node, str) else ""


def merge(streams: list[Iterator[Record]]) -> Iterator[Record]:
    """Merge time-ordered streams into one, by event time."""
    return heapq.merge(*streams, key=lambda r: r.ts)


__all__ = ["FleetMess", "idle_hardware", "merge"]
