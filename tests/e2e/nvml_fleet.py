"""The NVML path of a fleet, as a real process: trainguard's node loop with its NVML collector and kernel-log reader.

    python nvml_fleet.py STATE_DIR NODE:JOB [NODE:JOB ...]

No GPU exists here, so NVML is a FAKE at its boundary: a module with the real
`pynvml`'s constants and error classes whose device calls read
`STATE_DIR/<node>.json` ({"gpus": [{"lost": false, "ecc_dbe": 0, ...}], "xids":
[[gpu, code], ...]}; each XID listed is delivered once, as the driver's event
set does). Everything above it is the real code: `GpuCollector`,
`NvmlReader`, the kernel-log `LineSource` (reading `STATE_DIR/<node>.kmsg`
as it would /dev/kmsg), `NodeLoop` and the spooling `Publisher` to the
broker in TRAINGUARD_BROKER__BOOTSTRAP under TRAINGUARD_TOPICS__PREFIX.
Runs until SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import types
from pathlib import Path
from typing import Any

import pynvml

from trainguard.collectors.logs import FileFollower, LogParser
from trainguard.collectors.metrics import CollectorMetrics
from trainguard.collectors.node import LineSource, NodeLoop
from trainguard.collectors.nvml import GpuCollector, NvmlReader
from trainguard.collectors.publisher import Publisher
from trainguard.schemas.topics import Topics


def fake_nvml(state: Path) -> types.ModuleType:
    """A pynvml-shaped module whose two GPUs' readings come from the JSON file `state`."""
    mod = types.ModuleType("fake_pynvml")
    mod.__dict__.update({k: v for k, v in vars(pynvml).items() if k.startswith(("NVML", "nvmlEventType"))})
    delivered = [0]

    def gpus() -> list[dict[str, Any]]:
        return list(json.loads(state.read_text())["gpus"])

    def handle(i: int) -> int:
        if gpus()[i].get("lost"):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return i

    def wait(_set: Any, _ms: int) -> Any:
        xids = json.loads(state.read_text()).get("xids", [])
        if delivered[0] >= len(xids):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        gpu, code = xids[delivered[0]]
        delivered[0] += 1
        return types.SimpleNamespace(device=gpu, eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=code)

    def ecc(h: int, kind: int, counter: int) -> int:
        return int(gpus()[h].get("ecc_sbe" if kind == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else "ecc_dbe", 0))

    def unsupported(*_: Any) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    mod.__dict__.update(
        nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: len(gpus()), nvmlDeviceGetHandleByIndex=handle,
        nvmlEventSetCreate=lambda: "set", nvmlDeviceRegisterEvents=lambda h, t, s: None, nvmlEventSetWait_v2=wait,
        nvmlDeviceGetIndex=lambda h: h, nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=97, memory=40),
        nvmlDeviceGetClockInfo=lambda h, c: 1980, nvmlDeviceGetMaxClockInfo=lambda h, c: 1980,
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=68348 * 1024**2),
        nvmlDeviceGetPowerUsage=lambda h: 652_000, nvmlDeviceGetTemperature=lambda h, s: 61,
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0, nvmlDeviceGetTotalEccErrors=ecc,
        nvmlDeviceGetPcieReplayCounter=lambda h: 0, nvmlDeviceGetNvLinkErrorCounter=unsupported,
        nvmlDeviceGetFieldValues=unsupported,
        nvmlDeviceGetRemappedRows=lambda h: (0, int(gpus()[h].get("remapped_uncorrectable", 0)), 0, 0),
        NVMLError=pynvml.NVMLError, **{k: v for k, v in vars(pynvml).items() if k.startswith("NVMLError_")},
    )
    return mod


def node_loop(state_dir: Path, node: str, job: str) -> tuple[NodeLoop, Publisher]:
    publisher = Publisher(servers=os.environ["TRAINGUARD_BROKER__BOOTSTRAP"],
                          topics=Topics(os.environ["TRAINGUARD_TOPICS__PREFIX"]),
                          spool_dir=state_dir / f"spool-{node}", client_id=f"nvml-fleet-{node}")
    loop = NodeLoop(sink=publisher, metrics=CollectorMetrics())
    reader = NvmlReader(nvml=fake_nvml(state_dir / f"{node}.json"))
    loop.add(GpuCollector(node=node, job=job, reader=reader), interval_s=1.0)
    kmsg = FileFollower(state_dir / f"{node}.kmsg", from_start=True)
    loop.add(LineSource(name="kernel_log", reader=kmsg, parser=LogParser(node=node, source="kernel", job=job)),
             interval_s=1.0)
    return loop, publisher


def main() -> None:
    state_dir = Path(sys.argv[1])
    loops = [node_loop(state_dir, *spec.split(":", 1)) for spec in sys.argv[2:]]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threads = [threading.Thread(target=loop.run, daemon=True) for loop, _ in loops]
    for t in threads:
        t.start()
    stop.wait()
    for loop, _ in loops:
        loop.stop_event.set()
    for t in threads:
        t.join(timeout=5)
    for loop, publisher in loops:
        loop.close()
        publisher.close(timeout_s=10)


if __name__ == "__main__":
    main()
