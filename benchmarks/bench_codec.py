"""Decodes per second of one 8-GPU `NodeGpuSample`, on one core.

The worker decodes every message it consumes, and GPU samples are the bulk
of the traffic (one per node per second), so this bounds the whole pipeline.
Variants: the worker's path (`Codec.decode`, tagged union of every record
type, plus version and size checks), the typed path (`expect=`), and bare
msgspec decoders (JSON and, for reference only, msgpack). Target: >= 500k decodes/s.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from trainguard.schemas.codec import AnyRecord, Codec
from trainguard.schemas.records import GpuStats, NodeGpuSample, TrainingStep, XidEvent

TARGET_PER_S = 500_000


def sample(gpus: int = 8) -> NodeGpuSample:
    """A realistic healthy node sample (all fields set, like the NVML collector's)."""
    return NodeGpuSample(
        ts=1_764_000_000.123, node="node-0417", job="llm-pretrain-7",
        gpus=[GpuStats(index=i, uuid=f"GPU-3f2a9c1e-8b7d-4e6f-a1b2-{i:012d}", util_pct=97.0 + i / 10,
                       sm_clock_mhz=1980.0, max_sm_clock_mhz=1980.0, mem_used_mb=71_234.5, power_w=655.2 + i,
                       temp_c=61.0 + i, throttle_reasons=0, ecc_sbe=3, ecc_dbe=0, remapped_correctable=1,
                       nvlink_errors=0, pcie_replays=2) for i in range(gpus)],
        xids=[XidEvent(gpu=3, code=63, ts=1_764_000_000.0, message="row remapping")],
    )


def step() -> TrainingStep:
    """A training step as the hook sends it (finite loss and grad norm: the common case)."""
    return TrainingStep(ts=1_764_000_000.123, job="llm-pretrain-7", rank=1234, node="node-0417", step=52_311,
                        loss=2.1345, grad_norm=0.913, tokens=4_194_304, step_time_s=1.92, compute_time_s=1.61,
                        mfu=0.412, dp=38, tp=2, pp=1, checksum="9f2c41aa")


def rate(fn: Callable[[], Any], seconds: float) -> float:
    """Calls per CPU-second of `fn` (process time, so a busy machine does not skew it), best of three."""
    best = 0.0
    for _ in range(3):
        n, start = 0, time.process_time()
        while (elapsed := time.process_time() - start) < seconds:
            for _ in range(1000):
                fn()
            n += 1000
        best = max(best, n / elapsed)
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_codec", description=__doc__)
    parser.add_argument("--seconds", type=float, default=1.0, help="length of each timed run")
    args = parser.parse_args(argv)
    sample_obj = sample()
    data = Codec().encode(sample_obj)
    packed = msgspec.msgpack.encode(sample_obj)  # reference only: the wire format is JSON
    packed_decoder = msgspec.msgpack.Decoder(NodeGpuSample)
    codec = Codec()
    step_obj = step()
    step_data = codec.encode(step_obj)
    union = msgspec.json.Decoder(AnyRecord)
    typed = msgspec.json.Decoder(NodeGpuSample)
    variants: dict[str, Callable[[], Any]] = {
        "Codec.decode (worker path: any record)": lambda: codec.decode(data),
        "Codec.decode(expect=NodeGpuSample)": lambda: codec.decode(data, NodeGpuSample),
        "msgspec Decoder(AnyRecord), bare": lambda: union.decode(data),
        "msgspec Decoder(NodeGpuSample), bare": lambda: typed.decode(data),
        "msgspec msgpack Decoder(NodeGpuSample), bare": lambda: packed_decoder.decode(packed),
        "Codec.encode": lambda: codec.encode(sample_obj),
        "Codec.decode(TrainingStep payload)": lambda: codec.decode(step_data),
        "Codec.encode(TrainingStep)": lambda: codec.encode(step_obj),
    }
    print(f"payload: 8-GPU NodeGpuSample, {len(data)} bytes of JSON ({len(packed)} as msgpack); "
          f"one core; target >= {TARGET_PER_S:,}/s")
    for label, fn in variants.items():
        per_s = rate(fn, args.seconds)
        verdict = "  (meets target)" if per_s >= TARGET_PER_S else "  (below target)"
        mark = "" if label.startswith("Codec.encode") else verdict
        print(f"  {label:42s} {per_s:>12,.0f} /CPU-s  {1e6 / per_s:6.2f} us{mark}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
