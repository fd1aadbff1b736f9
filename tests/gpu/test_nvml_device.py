"""The NVML collector against the real device: the sample the node agent would publish."""

from __future__ import annotations

import time

import pytest
import torch

from trainguard.collectors.nvml import GpuCollector
from trainguard.schemas.codec import Codec

pytestmark = pytest.mark.gpu


def test_a_sample_of_the_real_device_sees_every_gpu_and_round_trips() -> None:
    collector = GpuCollector(node="gpu-test", timeout_s=10.0)
    try:
        (sample,) = collector.collect(time.time())
        (again,) = collector.collect(time.time())  # the steady state, after NVML is open
    finally:
        collector.close()
    assert sample.nvml_ok and again.nvml_ok, sample.error
    assert [g.index for g in sample.gpus] == list(range(torch.cuda.device_count()))
    for gpu in sample.gpus:
        assert gpu.uuid.startswith("GPU-") and gpu.max_sm_clock_mhz > 0 and gpu.temp_c > 0
    codec = Codec()
    assert codec.decode(codec.encode(sample)) == sample
