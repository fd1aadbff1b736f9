"""Simulated node hardware: GPU samples (NVML-like) and RDMA port samples.

Each node keeps its own cumulative counters (ECC, NVLink, link errors), as a
real driver does, so detectors see counter *growth* rather than absolute
values. Readings follow the job's mode (training, checkpointing, hung ...)
and the faults the plan says are active on this node, plus slow diurnal
drifts and background noise that must not be mistaken for faults.
"""

from __future__ import annotations

import math
import random

from trainguard.lab.telemetry_sim.plan import BENIGN_XIDS, Fault
from trainguard.schemas.records import GpuStats, NodeGpuSample, RdmaPort, RdmaSample, XidEvent

MAX_CLOCK_MHZ = 1980.0
DAY_S = 86_400.0
XID_TEXT = {13: "Graphics Engine Exception", 31: "GPU memory page fault", 43: "GPU stopped processing",
            46: "GPU stopped processing", 48: "Double Bit ECC Error", 63: "Row remapping pending",
            64: "Row remapper failure", 74: "NVLink Error", 79: "GPU has fallen off the bus",
            92: "High single-bit ECC error rate", 94: "Contained ECC error", 95: "Uncontained ECC error",
            119: "GSP RPC timeout", 120: "GSP Error", 140: "Unrecovered ECC Error"}
# mode -> (GPU utilisation %, RDMA bits/s per port)
MODE_LOAD = {"training": (97.0, 2.4e10), "checkpointing": (6.0, 6e8), "eval": (70.0, 3e9),
             "hung": (100.0, 2e4), "hung_idle": (0.0, 2e4), "down": (0.0, 1e3), "init": (12.0, 1e8),
             "stopped": (0.0, 1e3)}


class NodeHardware:
    """One node's GPUs and NICs; `gpu_sample`/`rdma_sample` advance its counters."""

    def __init__(self, *, name: str, index: int, job: str, gpus: int, ports: int, seed: int,
                 benign_xids_per_h: float, rdma_errors_per_port_h: float) -> None:
        self.name, self.index, self.job = name, index, job
        self._rng = random.Random(seed)
        self._gpus, self._ports = gpus, ports
        self._temp_base = [self._rng.uniform(52.0, 64.0) for _ in range(gpus)]
        self._phase = [self._rng.uniform(0.0, 2 * math.pi) for _ in range(gpus)]
        self._clock = [MAX_CLOCK_MHZ - self._rng.uniform(0.0, 45.0) for _ in range(gpus)]
        self._sbe = [self._rng.randrange(0, 40) for _ in range(gpus)]
        self._dbe = [0] * gpus
        self._remapped = [0] * gpus
        self._nvlink = [self._rng.randrange(0, 5) for _ in range(gpus)]
        self._remap_failed = [False] * gpus
        self._tx = [0] * ports
        self._rx = [0] * ports
        self._downed = [0] * ports
        self._symbol = [self._rng.randrange(0, 3) for _ in range(ports)]
        self._rcv = [0] * ports
        self._recovery = [0] * ports
        self._seen: set[str] = set()
        self._benign_rate = benign_xids_per_h / 3600.0
        self._rdma_err_rate = rdma_errors_per_port_h / 3600.0

    def gpu_sample(self, ts: float, dt: float, mode: str, faults: list[Fault]) -> NodeGpuSample:
        """The node's NVML reading at `ts`, `dt` seconds after the previous one."""
        rng = self._rng
        util, _ = MODE_LOAD[mode]
        xids: list[XidEvent] = []
        lost: set[int] = set()
        slow: Fault | None = None
        for f in faults:
            if f.kind == "user_error" and f.variant == "app_xid":
                self._app_xid(f, ts, xids)
            if f.node != self.index or f.start > ts:
                continue
            if f.kind == "hw_fault" and f.variant == "nvml_timeout" and f.active(ts):
                # The collector's NVML read hangs on the sick GPU: the whole sample times out.
                return NodeGpuSample(ts=ts, node=self.name, job=self.job, nvml_ok=False,
                                     error="NVML call timed out after 5.0s")
            if f.kind == "slowdown" and f.active(ts):
                slow = f
            elif f.kind == "hw_fault":
                self._hw_effect(f, ts, xids, lost)
        if self._benign_rate and rng.random() < 1.0 - math.exp(-self._benign_rate * dt):
            code = rng.choice(BENIGN_XIDS)
            xids.append(XidEvent(gpu=rng.randrange(self._gpus), code=code, ts=ts - rng.uniform(0, dt),
                                 message=XID_TEXT[code]))
        drift = math.sin(2 * math.pi * (ts % DAY_S) / DAY_S)
        gpus = [self._gpu(i, ts, util, drift, slow, i in lost) for i in range(self._gpus)]
        return NodeGpuSample(ts=ts, node=self.name, job=self.job, gpus=gpus, xids=xids)

    def _app_xid(self, f: Fault, ts: float, xids: list[XidEvent]) -> None:
        """The job's kernel faults on every node at once: each node's driver logs the application XID."""
        at = f.start + 0.02 * self.index
        if at <= ts and f.id not in self._seen:
            self._seen.add(f.id)
            xids.append(XidEvent(gpu=self._rng.randrange(self._gpus), code=f.code, ts=at, message=XID_TEXT[f.code]))

    def _hw_effect(self, f: Fault, ts: float, xids: list[XidEvent], lost: set[int]) -> None:
        first = f.id not in self._seen
        self._seen.add(f.id)
        if f.variant == "xid" and first:
            xids.append(XidEvent(gpu=f.gpu, code=f.code, ts=f.start, message=XID_TEXT.get(f.code, "")))
            if f.code in (48, 94, 95):
                self._dbe[f.gpu] += 1
        elif f.variant == "dbe" and first:
            self._dbe[f.gpu] += self._rng.randint(1, 4)
            self._remapped[f.gpu] += 1
        elif f.variant == "remap_failed" and first:
            self._dbe[f.gpu] += 1
            self._remapped[f.gpu] += 1
            xids.append(XidEvent(gpu=f.gpu, code=64, ts=f.start, message=XID_TEXT[64]))
        elif f.variant == "nvlink" and f.active(ts):
            self._nvlink[f.gpu] += self._rng.randint(60, 900)
        if f.active(ts) and (f.variant == "lost" or (f.variant == "xid" and f.code == 79)):
            lost.add(f.gpu)
        if f.variant == "remap_failed":
            self._remap_failed[f.gpu] = f.active(ts)  # until the GPU is replaced at the fault's end

    def _gpu(self, i: int, ts: float, util: float, drift: float, slow: Fault | None, lost: bool) -> GpuStats:
        rng = self._rng
        if lost:
            return GpuStats(index=i, uuid=f"GPU-{self.name}-{i}", lost=True, ecc_sbe=self._sbe[i],
                            ecc_dbe=self._dbe[i], remapped_uncorrectable=self._remapped[i],
                            nvlink_errors=self._nvlink[i])
        busy = util / 100.0
        clock = self._clock[i] * (1.0 - 0.01 * abs(drift)) + rng.gauss(0.0, 4.0)
        temp = self._temp_base[i] + 4.0 * math.sin(2 * math.pi * ts / DAY_S + self._phase[i]) + 12.0 * busy
        power = 120.0 + 540.0 * busy + rng.gauss(0.0, 12.0)
        throttle = 0
        if slow is not None and slow.variant != "silent":
            clock *= 1.0 - slow.magnitude * 1.1
            if slow.variant == "thermal":
                temp += 14.0 + 20.0 * slow.magnitude
                throttle = 0x20 | 0x40  # SW + HW thermal slowdown
            else:
                power *= 1.0 - slow.magnitude
                throttle = 0x04  # SW power cap
        if rng.random() < 1e-4:
            self._sbe[i] += 1
        return GpuStats(
            index=i, uuid=f"GPU-{self.name}-{i}", util_pct=min(100.0, max(0.0, util + rng.gauss(0.0, 1.5))),
            sm_clock_mhz=round(clock, 1), max_sm_clock_mhz=MAX_CLOCK_MHZ,
            mem_used_mb=round(64_000.0 * (busy > 0.05) + rng.uniform(0, 900), 1),
            power_w=round(max(60.0, power), 1), temp_c=round(temp + rng.gauss(0.0, 0.4), 1),
            throttle_reasons=throttle, ecc_sbe=self._sbe[i], ecc_dbe=self._dbe[i],
            remapped_uncorrectable=self._remapped[i], remap_pending=self._remapped[i] > 0,
            remap_failed=self._remap_failed[i],
            nvlink_errors=self._nvlink[i],
        )

    def rdma_sample(self, ts: float, dt: float, mode: str, faults: list[Fault]) -> RdmaSample:
        """The node's RDMA ports at `ts`; traffic follows the job's mode."""
        rng = self._rng
        _, rate = MODE_LOAD[mode]
        down: set[int] = set()
        burst: set[int] = set()
        share: dict[int, float] = {}
        for f in faults:
            if f.node != self.index or f.kind != "network" or not f.active(ts):
                continue
            port = f.gpu % self._ports
            if f.variant == "degraded":  # renegotiated to a lower speed: slow, but no errors
                share[port] = f.magnitude
            elif f.variant == "fail_slow":  # a marginal link: a fraction of its siblings' traffic, symbol errors
                share[port] = f.magnitude
                burst.add(port)
            elif f.variant == "port_down":
                if f.id not in self._seen:
                    self._seen.add(f.id)
                    self._downed[port] += 1
                    self._recovery[port] += 1
                down.add(port)
            else:
                burst.add(port)
        ports = []
        for p in range(self._ports):
            scale = 0.0 if p in down else share.get(p, 1.0)
            bps_tx = scale * rate * rng.lognormvariate(0.0, 0.05)
            bps_rx = scale * rate * rng.lognormvariate(0.0, 0.05)
            self._tx[p] += int(bps_tx * dt / 8)
            self._rx[p] += int(bps_rx * dt / 8)
            if p in burst:
                self._symbol[p] += rng.randint(40, 2500)
                self._rcv[p] += rng.randint(10, 400)
            elif self._rdma_err_rate and rng.random() < self._rdma_err_rate * dt:
                self._symbol[p] += 1
            ports.append(RdmaPort(
                device=f"mlx5_{p}", port=1, state="DOWN" if p in down else "ACTIVE",
                tx_bytes=self._tx[p], rx_bytes=self._rx[p], tx_bps=round(bps_tx, 1), rx_bps=round(bps_rx, 1),
                link_downed=self._downed[p], symbol_errors=self._symbol[p], rcv_errors=self._rcv[p],
                link_error_recovery=self._recovery[p],
            ))
        return RdmaSample(ts=ts, node=self.name, job=self.job, ports=ports)
