"""The training hook on a CUDA model: steps with MFU against the device's peak, a parameter checksum."""

from __future__ import annotations

import pytest
import torch
from fakes import ListSink
from torch import nn

from trainguard.schemas.records import TrainingStep
from trainguard.training_hook import TrainingMonitor, detect_peak_flops

pytestmark = pytest.mark.gpu


def test_steps_of_a_cuda_model_carry_mfu_and_a_checksum_of_the_device_parameters() -> None:
    model = nn.Linear(1024, 1024).cuda()
    sink = ListSink()
    monitor = TrainingMonitor(job="gpu", model=model, publisher=sink, checksum_every=2, install_stack_signal=False,
                              env={"NODE_NAME": "gpu-test"})
    try:
        for _ in range(4):
            loss = model(torch.randn(512, 1024, device="cuda")).square().mean()
            loss.backward()
            torch.cuda.synchronize()
            monitor.step(loss=loss.item(), tokens=512)
    finally:
        monitor.close()
    steps = sink.of(TrainingStep)
    assert [s.step for s in steps] == [1, 2, 3, 4]
    assert [s.checksum is not None for s in steps] == [False, True, False, True]
    if detect_peak_flops() is not None:  # a device the peak table knows: MFU is a fraction of it
        assert all(s.mfu is not None and 0 < s.mfu < 1 for s in steps[1:])
