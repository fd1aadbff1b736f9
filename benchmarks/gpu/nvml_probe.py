"""The NVML collector against the real device: what one sample sees, and what taking it costs.

It is the collector the node agent runs (`collectors.nvml.GpuCollector` with
the real `pynvml`), not a re-implementation: a sample that says
`nvml_ok=False` is what the node would publish (unobserved, never healthy),
and on a machine without a GPU that is the expected answer.
"""

from __future__ import annotations

import socket
import statistics
import time
from typing import Any

import msgspec

from trainguard.collectors.nvml import GpuCollector


def probe(*, samples: int = 20, interval_s: float = 0.05, timeout_s: float = 5.0) -> dict[str, Any]:
    """Take `samples` samples; the first in full, every one timed."""
    collector = GpuCollector(node=socket.gethostname(), timeout_s=timeout_s)
    took: list[float] = []
    first: Any = None
    ok = 0
    try:
        for i in range(samples):
            t0 = time.perf_counter()
            (sample,) = collector.collect(time.time())
            took.append(time.perf_counter() - t0)
            ok += int(sample.nvml_ok)
            first = first or sample
            if i < samples - 1:
                time.sleep(interval_s)
    finally:
        collector.close()
    opening, steady = took[0], sorted(took[1:] or took)
    return {
        "samples": samples, "nvml_ok": ok, "gpus": len(first.gpus), "error": first.error, "xids": len(first.xids),
        # the first collect opens NVML and registers the XID event set: shown apart from the steady state
        "first_collect_ms": round(opening * 1e3, 3),
        "collect_ms": {"p50": round(statistics.median(steady) * 1e3, 3),
                       "p99": round(steady[min(len(steady) - 1, int(len(steady) * 0.99))] * 1e3, 3),
                       "max": round(steady[-1] * 1e3, 3)},
        "sample": msgspec.to_builtins(first),
    }
