"""The NVML collector against a fake `pynvml` module at the boundary.

No GPU exists here, so the tests inject a module that has the real pynvml's
constants and error classes and fake device functions. Everything above the
boundary (reading, parsing, event handling, timeouts) is the real code.
"""

from __future__ import annotations

import threading
import types
from typing import Any

import pynvml
import pytest

from trainguard.collectors.nvml import GpuCollector, NvmlReader, parse_gpu


class FakeGpu:
    def __init__(self, index: int) -> None:
        self.index = index
        self.lost = False


def fake_nvml(n_gpus: int = 2, *, init_error: bool = False, recovery: bool = True) -> Any:
    """A module with real pynvml constants/errors and fake device calls."""
    mod = types.ModuleType("fake_pynvml")
    mod.__dict__.update({k: v for k, v in vars(pynvml).items() if k.startswith(("NVML", "nvmlEventType"))})
    gpus = [FakeGpu(i) for i in range(n_gpus)]
    events: list[Any] = []
    mod.gpus, mod.events, mod.hang = gpus, events, threading.Event()
    mod.hang.set()

    def init() -> None:
        if init_error:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    def handle(i: int) -> FakeGpu:
        if gpus[i].lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpus[i]

    def wait(_set: Any, _timeout_ms: int) -> Any:
        if not events:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        return events.pop(0)

    def temperature(h: FakeGpu, _sensor: int) -> int:
        mod.hang.wait()  # a hung driver call when the test clears `hang`
        return 60 + h.index

    def nvlink(h: FakeGpu, link: int, counter: int) -> int:
        if link >= 2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return 1

    def fields(h: FakeGpu, ids: list[int]) -> list[Any]:
        ret = pynvml.NVML_SUCCESS if recovery else pynvml.NVML_ERROR_NOT_SUPPORTED
        return [types.SimpleNamespace(nvmlReturn=ret, value=types.SimpleNamespace(uiVal=2))]

    mod.__dict__.update(
        nvmlInit=init, nvmlDeviceGetCount=lambda: len(gpus), nvmlDeviceGetHandleByIndex=handle,
        nvmlEventSetCreate=lambda: "set", nvmlDeviceRegisterEvents=lambda h, t, s: None,
        nvmlEventSetWait_v2=wait, nvmlDeviceGetIndex=lambda h: h.index,
        nvmlDeviceGetUUID=lambda h: f"GPU-{h.index}",
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=97, memory=40),
        nvmlDeviceGetClockInfo=lambda h, c: 1410, nvmlDeviceGetMaxClockInfo=lambda h, c: 1980,
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=40 * 1024**3),
        nvmlDeviceGetPowerUsage=lambda h: 612_000, nvmlDeviceGetTemperature=temperature,
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0x20,
        nvmlDeviceGetTotalEccErrors=lambda h, kind, counter: 5 if kind == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else 1,
        nvmlDeviceGetPcieReplayCounter=lambda h: _raise(pynvml.NVML_ERROR_NOT_SUPPORTED),
        nvmlDeviceGetNvLinkErrorCounter=nvlink, nvmlDeviceGetFieldValues=fields,
        nvmlDeviceGetRemappedRows=lambda h: (3, 1, 1, 0),
        NVMLError=pynvml.NVMLError, **{k: v for k, v in vars(pynvml).items() if k.startswith("NVMLError_")},
    )
    return mod


def _raise(code: int) -> Any:
    raise pynvml.NVMLError(code)


def _xid(gpu: FakeGpu, code: int) -> Any:
    return types.SimpleNamespace(device=gpu, eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=code)


def test_every_field_is_read_and_parsed() -> None:
    nv = fake_nvml()
    sample = GpuCollector(node="n0", reader=NvmlReader(nvml=nv)).collect(5.0)[0]
    assert sample.nvml_ok and sample.error == "" and len(sample.gpus) == 2
    g = sample.gpus[1]
    assert (g.index, g.uuid, g.util_pct, g.sm_clock_mhz, g.max_sm_clock_mhz) == (1, "GPU-1", 97, 1410, 1980)
    assert (g.mem_used_mb, g.power_w, g.temp_c, g.throttle_reasons) == (40 * 1024, 612.0, 61.0, 0x20)
    assert (g.ecc_sbe, g.ecc_dbe, g.remapped_correctable, g.remapped_uncorrectable) == (5, 1, 3, 1)
    assert (g.remap_pending, g.remap_failed, g.nvlink_errors, g.recovery_action) == (True, False, 8, 2)
    assert g.pcie_replays == 0 and not g.lost  # not supported -> default, still a healthy read


def test_recovery_action_absent_from_driver_keeps_default() -> None:
    sample = GpuCollector(node="n0", reader=NvmlReader(nvml=fake_nvml(recovery=False))).collect(1.0)[0]
    assert sample.nvml_ok and sample.gpus[0].recovery_action == 0


def test_xids_arrive_once_each_with_their_gpu() -> None:
    nv = fake_nvml()
    collector = GpuCollector(node="n0", reader=NvmlReader(nvml=nv))
    collector.collect(1.0)
    nv.events.extend([_xid(nv.gpus[1], 79), _xid(nv.gpus[0], 48)])
    second = collector.collect(2.0)[0]
    third = collector.collect(3.0)[0]
    assert [(x.gpu, x.code, x.ts) for x in second.xids] == [(1, 79, 2.0), (0, 48, 2.0)]
    assert third.xids == []


def test_lost_gpu_is_flagged() -> None:
    nv = fake_nvml()
    nv.gpus[0].lost = True
    sample = GpuCollector(node="n0", reader=NvmlReader(nvml=nv)).collect(1.0)[0]
    assert sample.nvml_ok and sample.gpus[0].lost and not sample.gpus[1].lost


def test_missing_nvml_is_unobserved_never_healthy() -> None:
    sample = GpuCollector(node="n0", reader=NvmlReader(nvml=fake_nvml(init_error=True))).collect(1.0)[0]
    assert not sample.nvml_ok and sample.gpus == [] and "NVML init failed" in sample.error


def test_no_pynvml_module_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    def refuse(name: str) -> Any:
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(importlib, "import_module", refuse)
    sample = GpuCollector(node="n0").collect(1.0)[0]
    assert not sample.nvml_ok and "pynvml not importable" in sample.error


def test_hung_call_times_out_and_is_reported_without_stalling() -> None:
    nv = fake_nvml()
    collector = GpuCollector(node="n0", reader=NvmlReader(nvml=nv), timeout_s=0.3)
    assert collector.collect(1.0)[0].nvml_ok
    nv.hang.clear()  # the next temperature read never returns
    first = collector.collect(2.0)[0]
    second = collector.collect(3.0)[0]
    assert not first.nvml_ok and "timed out after 0.3s" in first.error
    assert not second.nvml_ok and "still hung" in second.error
    nv.hang.set()  # the driver recovers
    collector._hung.result(timeout=5)  # type: ignore[union-attr]
    assert collector.collect(4.0)[0].nvml_ok
    collector.close()


def test_parse_gpu_defaults_for_empty_raw() -> None:
    g = parse_gpu(3, {})
    assert g.index == 3 and g.util_pct == 0.0 and not g.lost
