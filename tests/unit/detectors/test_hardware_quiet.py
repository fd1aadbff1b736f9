"""The hardware detector's one-pass path for quiet samples finds exactly what the GPU-by-GPU path finds.

Nearly every 8-GPU sample says nothing: no XID, no counter grown, no flag raised. `HardwareDetector._quiet`
answers those in one pass (issue 23); the rest take the GPU-by-GPU path. `_GpuByGpu` is the detector
without it. Both are fed the same random streams (quiet stretches, ECC and remap growth, counter resets,
lost and missing GPUs, NVLink bursts, recovery actions, XIDs, a GPU listed twice) and must return the same
anomalies and end in the same state.
"""

from __future__ import annotations

import pickle
import random

import msgspec
from fakes import quiet_variants, same_findings

from trainguard.detectors.hardware import HardwareDetector
from trainguard.schemas.records import GpuStats, NodeGpuSample, XidEvent

_Counting, _GpuByGpu = quiet_variants(HardwareDetector)


def _state(d: HardwareDetector) -> bytes:
    nodes = {n: (r.job, {i: (s.dbe, s.remap_unc, s.nvlink, s.failed, s.lost, list(s.bursts))
                         for i, s in r.gpus.items()}) for n, r in d._nodes.items()}
    return pickle.dumps((nodes, dict(d._fired), d._now))


def _samples(rng: random.Random, node: str, n: int) -> list[NodeGpuSample]:
    width = rng.choice([1, 4, 8])
    counters = [[0, 0, 0] for _ in range(width)]  # dbe, remap_unc, nvlink
    out = []
    for s in range(n):
        trouble = rng.random() < 0.2 / width
        gpus = []
        for i in range(width):
            c = counters[i]
            if trouble and rng.random() < 0.3:
                c[rng.randrange(3)] += rng.choice([1, 5, 25])
            if rng.random() < 0.005:
                c[:] = [0, 0, 0]  # a counter reset (driver reload)
            flags = {k: True for k in ("lost", "remap_failed") if trouble and rng.random() < 0.05}
            action = 2 if trouble and rng.random() < 0.03 else 0
            gpus.append(GpuStats(index=i, util_pct=95.0, ecc_dbe=c[0], remapped_uncorrectable=c[1],
                                 nvlink_errors=c[2], recovery_action=action, **flags))
        if trouble and width > 1 and rng.random() < 0.2:
            gpus.pop(rng.randrange(width))  # a GPU fell off the bus
        if rng.random() < 0.02:  # a GPU listed twice, first as if reset (and, half the time, another one gone)
            gpus.insert(0, msgspec.structs.replace(gpus[0], ecc_dbe=0, nvlink_errors=0))
            if width > 1 and rng.random() < 0.5:
                gpus.pop()
        xids = [XidEvent(gpu=0, code=rng.choice([13, 79]), ts=s * 10.0)] if trouble and rng.random() < 0.1 else []
        out.append(NodeGpuSample(ts=s * 10.0 + rng.random(), node=node, job="j", gpus=gpus, xids=xids))
    return out


def test_the_one_pass_path_finds_what_the_gpu_by_gpu_path_finds() -> None:
    rng = random.Random(2026)
    found = 0
    for stream in range(30):
        fast, slow = _Counting(cooldown_s=60.0), _GpuByGpu(cooldown_s=60.0)
        found += same_findings(fast, slow, _samples(rng, f"n{stream % 4}", 400), stream)
        assert _state(fast) == _state(slow), stream
        assert fast.quiet > 50, fast.quiet  # the one-pass path really answered many of the 400 samples
    assert found > 20  # XIDs, counter growth, lost, missing GPUs and bursts were exercised, not only silence


def test_a_sample_with_any_news_takes_the_gpu_by_gpu_path() -> None:
    d = HardwareDetector()
    calm = [GpuStats(index=i) for i in range(8)]
    assert d._quiet(NodeGpuSample(ts=0.0, node="n", gpus=calm)) is False  # a node not seen before
    d.observe(NodeGpuSample(ts=0.0, node="n", gpus=calm))
    assert d._quiet(NodeGpuSample(ts=10.0, node="n", gpus=calm)) is True
    for news in ({"ecc_dbe": 1}, {"nvlink_errors": 1}, {"lost": True}, {"remap_failed": True}, {"recovery_action": 1}):
        changed = [*calm[:7], GpuStats(index=7, **news)]  # type: ignore[arg-type]
        assert d._quiet(NodeGpuSample(ts=20.0, node="n", gpus=changed)) is False, news
    assert d._quiet(NodeGpuSample(ts=20.0, node="n", gpus=calm[:7])) is False  # a GPU missing
