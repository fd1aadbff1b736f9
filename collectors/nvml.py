"""GPU health through NVML (pynvml): one `NodeGpuSample` per interval.

Three layers, so every layer can be tested without a GPU:

* `NvmlReader` talks to the `pynvml` module (injected, so tests pass a fake
  module at the boundary) and returns raw values in NVML's own units.
* `parse_gpu` turns one GPU's raw values into a `GpuStats` (pure).
* `GpuCollector` runs the reader in a worker thread with a timeout. A hung
  NVML call (it happens when a GPU falls off the bus) must not stall the
  node agent, and a node we cannot see is reported `nvml_ok=False` with the
  reason: *unobserved*, never healthy.

XID errors arrive through an NVML event set: each event is delivered once by
the driver, and the collector keeps it until a sample carrying it is built,
so a failed read never swallows an XID.
"""

from __future__ import annotations

import concurrent.futures
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from trainguard.schemas.records import GpuStats, NodeGpuSample, XidEvent

# NVLink error counters summed into `nvlink_errors` (CRC flit/data, replay, recovery).
_NVLINK_COUNTERS = ("NVML_NVLINK_ERROR_DL_REPLAY", "NVML_NVLINK_ERROR_DL_RECOVERY",
                    "NVML_NVLINK_ERROR_DL_CRC_FLIT", "NVML_NVLINK_ERROR_DL_CRC_DATA")


class NvmlUnavailable(RuntimeError):
    """NVML cannot be loaded, initialised or read; the message says why."""


def parse_gpu(index: int, raw: dict[str, Any]) -> GpuStats:
    """Raw NVML values (bytes, mW, ...) to a `GpuStats` in the record's units.

    Missing keys (the driver does not support that query) keep the default.

    >>> parse_gpu(0, {"mem_used_bytes": 2 * 1024 * 1024, "power_mw": 250000}).power_w
    250.0
    """
    def num(key: str, scale: float = 1.0) -> float:
        value = raw.get(key)
        return float(value) / scale if value is not None else 0.0

    return GpuStats(
        index=index,
        uuid=str(raw.get("uuid", "")),
        util_pct=num("util_pct"),
        sm_clock_mhz=num("sm_clock_mhz"),
        max_sm_clock_mhz=num("max_sm_clock_mhz"),
        mem_used_mb=num("mem_used_bytes", 1024 * 1024),
        power_w=num("power_mw", 1000.0),
        temp_c=num("temp_c"),
        throttle_reasons=int(raw.get("throttle_reasons") or 0),
        ecc_sbe=int(raw.get("ecc_sbe") or 0),
        ecc_dbe=int(raw.get("ecc_dbe") or 0),
        remapped_correctable=int(raw.get("remapped_correctable") or 0),
        remapped_uncorrectable=int(raw.get("remapped_uncorrectable") or 0),
        remap_failed=bool(raw.get("remap_failed", False)),
        remap_pending=bool(raw.get("remap_pending", False)),
        nvlink_errors=int(raw.get("nvlink_errors") or 0),
        pcie_replays=int(raw.get("pcie_replays") or 0),
        recovery_action=int(raw.get("recovery_action") or 0),
        lost=bool(raw.get("lost", False)),
    )


class NvmlReader:
    """Raw reads through a `pynvml`-compatible module. Not thread-safe: one caller."""

    def __init__(self, *, nvml: ModuleType | None = None, max_nvlinks: int = 18) -> None:
        self._nvml = nvml
        self._max_nvlinks = max_nvlinks
        self._events: Any = None
        self._ready = False

    def open(self) -> None:
        """Load and initialise NVML, and register every GPU for XID events."""
        if self._nvml is None:
            try:
                self._nvml = importlib.import_module("pynvml")
            except ImportError as exc:
                raise NvmlUnavailable(f"pynvml not importable: {exc}") from None
        nv = self._nvml
        try:
            nv.nvmlInit()
            self._events = nv.nvmlEventSetCreate()
            for i in range(nv.nvmlDeviceGetCount()):
                try:
                    handle = nv.nvmlDeviceGetHandleByIndex(i)
                    nv.nvmlDeviceRegisterEvents(handle, nv.nvmlEventTypeXidCriticalError, self._events)
                except (nv.NVMLError_NotSupported, nv.NVMLError_GpuIsLost):
                    pass  # this GPU cannot report XIDs (a lost one shows as `lost` in samples)
        except nv.NVMLError as exc:
            raise NvmlUnavailable(f"NVML init failed: {exc}") from None
        self._ready = True

    def read(self) -> list[dict[str, Any]]:
        """Raw values for every GPU, in index order. Raises `NvmlUnavailable`."""
        if not self._ready:
            self.open()
        nv = self._nvml
        assert nv is not None
        try:
            return [self._read_one(i) for i in range(nv.nvmlDeviceGetCount())]
        except nv.NVMLError as exc:
            raise NvmlUnavailable(f"NVML read failed: {exc}") from None

    def poll_xids(self, now: float) -> list[XidEvent]:
        """XID events waiting in the event set (non-blocking); each is returned once."""
        if not self._ready or self._events is None:
            return []
        nv = self._nvml
        assert nv is not None
        out: list[XidEvent] = []
        while True:
            try:
                data = nv.nvmlEventSetWait_v2(self._events, 0)
            except nv.NVMLError_Timeout:
                return out
            except nv.NVMLError as exc:
                raise NvmlUnavailable(f"NVML event wait failed: {exc}") from None
            if data.eventType & nv.nvmlEventTypeXidCriticalError:
                out.append(XidEvent(gpu=int(nv.nvmlDeviceGetIndex(data.device)), code=int(data.eventData), ts=now))

    def _read_one(self, index: int) -> dict[str, Any]:
        nv = self._nvml
        assert nv is not None
        try:
            h = nv.nvmlDeviceGetHandleByIndex(index)
        except nv.NVMLError_GpuIsLost:
            return {"lost": True}
        raw: dict[str, Any] = {}
        reads: dict[str, Callable[[], Any]] = {
            "uuid": lambda: nv.nvmlDeviceGetUUID(h),
            "util_pct": lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu,
            "sm_clock_mhz": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            "max_sm_clock_mhz": lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM),
            "mem_used_bytes": lambda: nv.nvmlDeviceGetMemoryInfo(h).used,
            "power_mw": lambda: nv.nvmlDeviceGetPowerUsage(h),
            "temp_c": lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
            "throttle_reasons": lambda: nv.nvmlDeviceGetCurrentClocksThrottleReasons(h),
            "ecc_sbe": lambda: nv.nvmlDeviceGetTotalEccErrors(
                h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC),
            "ecc_dbe": lambda: nv.nvmlDeviceGetTotalEccErrors(
                h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
            "pcie_replays": lambda: nv.nvmlDeviceGetPcieReplayCounter(h),
            "nvlink_errors": lambda: self._nvlink_errors(h),
            "recovery_action": lambda: self._recovery_action(h),
        }
        for key, read in reads.items():
            try:
                raw[key] = read()
            except nv.NVMLError_GpuIsLost:
                return {**raw, "lost": True}
            except (nv.NVMLError_NotSupported, nv.NVMLError_NotFound):
                continue  # the driver or GPU does not have it: leave the default
        try:
            corr, unc, pending, failed = nv.nvmlDeviceGetRemappedRows(h)
            raw.update(remapped_correctable=corr, remapped_uncorrectable=unc,
                       remap_pending=bool(pending), remap_failed=bool(failed))
        except nv.NVMLError_NotSupported:
            pass  # pre-Ampere GPUs have no row remapping
        return raw

    def _nvlink_errors(self, handle: Any) -> int:
        nv = self._nvml
        assert nv is not None
        total = 0
        for link in range(self._max_nvlinks):
            try:
                for name in _NVLINK_COUNTERS:
                    total += int(nv.nvmlDeviceGetNvLinkErrorCounter(handle, link, getattr(nv, name)))
            except (nv.NVMLError_NotSupported, nv.NVMLError_InvalidArgument):
                break  # no more links on this GPU
        return total

    def _recovery_action(self, handle: Any) -> int | None:
        nv = self._nvml
        assert nv is not None
        field = getattr(nv, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
        if field is None:
            return None  # this pynvml predates the field
        value = nv.nvmlDeviceGetFieldValues(handle, [field])[0]
        if value.nvmlReturn != nv.NVML_SUCCESS:
            return None  # the driver does not have it
        return int(value.value.uiVal)


class GpuCollector:
    """Builds one `NodeGpuSample` per call; a hung or failing NVML is reported, not hidden."""

    name = "gpu"

    def __init__(self, *, node: str, reader: NvmlReader | None = None, timeout_s: float = 5.0,
                 job: str = "") -> None:
        self.node = node
        self.job = job
        self.timeout_s = timeout_s
        self._reader = reader or NvmlReader()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="nvml")
        self._hung: concurrent.futures.Future[Any] | None = None
        self._pending_xids: list[XidEvent] = []

    def collect(self, now: float) -> list[NodeGpuSample]:
        """One sample. Never raises: failure is a sample with `nvml_ok=False`."""
        if self._hung is not None and not self._hung.done():
            return [self._failed(now, f"NVML call still hung (over {self.timeout_s}s); not retrying yet")]
        self._hung = None
        future = self._pool.submit(self._read, now)
        try:
            raws, xids = future.result(timeout=self.timeout_s)
        except concurrent.futures.TimeoutError:
            self._hung = future
            return [self._failed(now, f"NVML call timed out after {self.timeout_s}s")]
        except NvmlUnavailable as exc:
            return [self._failed(now, str(exc))]
        except Exception as exc:  # a broken driver binding must still yield "unobserved"
            return [self._failed(now, f"NVML error: {type(exc).__name__}: {exc}")]
        self._pending_xids.extend(xids)
        gpus = [parse_gpu(i, raw) for i, raw in enumerate(raws)]
        sample = NodeGpuSample(ts=now, node=self.node, job=self.job, gpus=gpus, xids=self._pending_xids)
        self._pending_xids = []
        return [sample]

    def close(self) -> None:
        """Stop the worker thread (a hung one is abandoned, it is a daemon-like pool thread)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _read(self, now: float) -> tuple[list[dict[str, Any]], list[XidEvent]]:
        raws = self._reader.read()  # opens NVML (and its event set) on first use
        return raws, self._reader.poll_xids(now)

    def _failed(self, now: float, error: str) -> NodeGpuSample:
        # XIDs read before the failure stay pending for the next good sample.
        return NodeGpuSample(ts=now, node=self.node, job=self.job, nvml_ok=False, error=error)

