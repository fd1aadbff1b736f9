"""The slowdown detector's GPU evidence (peers.GpuSlowSignals.add) in one pass keeps exactly what two passes kept.

The reference is the code it replaced: a list of busy GPUs' clock ratios,
then a second loop for throttled or slow-clocked GPUs. Random samples mix
idle and busy GPUs at the bounds, throttle bits slow and harmless, GPUs
with no known maximum clock, empty and unobserved samples.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from trainguard.detectors.peers import SLOW_THROTTLE_BITS, GpuSlowSignals
from trainguard.schemas.records import GpuStats, NodeGpuSample


class TwoPasses(GpuSlowSignals):
    """The two-pass `add` as it was."""

    def add(self, sample: NodeGpuSample) -> None:
        if not sample.nvml_ok:
            return
        found: dict[str, Any] = {}
        ratios = [g.sm_clock_mhz / g.max_sm_clock_mhz for g in sample.gpus
                  if g.max_sm_clock_mhz > 0 and g.util_pct >= self.busy_pct]
        if ratios:
            self._clock[sample.node] = (sample.ts, min(ratios))
        for g in sample.gpus:
            if g.throttle_reasons & SLOW_THROTTLE_BITS:
                found[f"{sample.node}:{g.index}"] = {"throttle_reasons": g.throttle_reasons, "temp_c": g.temp_c}
            elif g.max_sm_clock_mhz > 0 and g.util_pct >= self.busy_pct and \
                    g.sm_clock_mhz < self.clock_ratio * g.max_sm_clock_mhz:
                found[f"{sample.node}:{g.index}"] = {"sm_clock_mhz": g.sm_clock_mhz, "max": g.max_sm_clock_mhz}
        if found:
            self._slow[sample.node] = (sample.ts, found)
        elif sample.node in self._slow:
            del self._slow[sample.node]


def _sample(rng: random.Random, ts: float) -> NodeGpuSample:
    gpus = [GpuStats(index=i, util_pct=rng.choice([0.0, 49.9, 50.0, 97.0]),
                     sm_clock_mhz=rng.choice([0.0, 1000.0, 1583.9, 1584.0, 1980.0]),
                     max_sm_clock_mhz=rng.choice([0.0, 1980.0, 1980.0]),
                     throttle_reasons=rng.choice([0, 0, 0x01, 0x04, 0x08, 0x40, 0x88]), temp_c=round(rng.uniform(30, 95)))
            for i in range(rng.randint(0, 8))]
    return NodeGpuSample(ts=ts, node=f"node-{rng.randint(0, 40)}", gpus=gpus, nvml_ok=rng.random() > 0.05)


@pytest.mark.parametrize("seed", range(5))
def test_one_pass_keeps_what_two_passes_kept(seed: int) -> None:
    rng = random.Random(seed)
    fast, slow = GpuSlowSignals(max_nodes=30), TwoPasses(max_nodes=30)  # a bound that bites: eviction order too
    for i in range(4000):
        sample = _sample(rng, float(i))
        fast.add(sample)
        slow.add(sample)
        assert list(fast._slow.items()) == list(slow._slow.items())  # noqa: SLF001 - the state is the point
        assert list(fast._clock.items()) == list(slow._clock.items())  # noqa: SLF001
    nodes = [f"node-{n}" for n in range(41)]
    assert fast.slow_nodes(nodes, 4000.0) == slow.slow_nodes(nodes, 4000.0)
