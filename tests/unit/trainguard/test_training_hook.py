"""The training hook on a real (tiny, CPU) torch model, publishing into a list."""

from __future__ import annotations

import math
import threading
import time

import torch
from list_sink import ListSink

from schemas.codec import Codec
from schemas.records import CheckpointEvent, Heartbeat, JobTopology, PhaseChange, TrainingStep
from trainguard.training_hook import TrainingMonitor, param_checksum

ENV = {"RANK": "2", "WORLD_SIZE": "4", "NODE_NAME": "gpu-3", "TRAINGUARD_ATTEMPT": "2",
       "TRAINGUARD_CODE_VERSION": "v7"}


def _monitor(sink: ListSink, model: torch.nn.Module, **kw: object) -> TrainingMonitor:
    return TrainingMonitor(job="j", model=model, publisher=sink, env=ENV, install_stack_signal=False,
                           peak_flops=1e12, heartbeat_interval_s=0.05, **kw)  # type: ignore[arg-type]


def test_step_records_carry_everything() -> None:
    sink, model = ListSink(), torch.nn.Linear(4, 4)
    mon = _monitor(sink, model, checksum_every=2, tp=2)
    first = mon.step(loss=0.5, tokens=1000, grad_norm=1.5)
    second = mon.step(loss=float("nan"), tokens=1000, grad_norm=float("inf"))
    mon.close()
    assert (first.rank, first.node, first.step, first.attempt, first.code_version) == (2, "gpu-3", 1, 2, "v7")
    assert (first.dp, first.tp, first.pp) == (1, 0, 0)
    assert first.checksum is None and second.checksum == param_checksum(model.parameters())
    assert math.isnan(second.loss) and second.grad_norm == math.inf  # floats in Python...
    assert b'"loss":"nan"' in Codec().encode(second) and b'"grad_norm":"inf"' in Codec().encode(second)  # ...on the wire
    assert first.mfu is not None and math.isclose(first.mfu, 6 * 20 * 1000 / first.step_time_s / 1e12)
    assert sink.of(TrainingStep) == [first, second]
    assert not sink.of(JobTopology)  # only rank 0 announces the topology


def test_checksum_is_identical_for_identical_replicas_and_differs_on_one_flipped_bit() -> None:
    a, b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
    b.load_state_dict(a.state_dict())
    assert param_checksum(a.parameters()) == param_checksum(b.parameters())
    with torch.no_grad():
        flat = b.weight.view(-1).view(torch.int32)
        flat[3] ^= 1
    assert param_checksum(a.parameters()) != param_checksum(b.parameters())


def test_phase_checkpoint_and_topology_on_rank0() -> None:
    sink = ListSink()
    mon = TrainingMonitor(job="j", publisher=sink, env={"NODE_NAME": "n0"}, install_stack_signal=False)
    mon.step(loss=1.0)
    with mon.phase("checkpointing"):
        mon.checkpoint_saved(1, "/ckpt/1")
    mon.close()
    assert [p.phase for p in sink.of(PhaseChange)] == ["checkpointing", "training", "stopped"]
    assert sink.of(CheckpointEvent)[0].path == "/ckpt/1"
    topo = sink.of(JobTopology)
    assert len(topo) == 1 and topo[0].rank_nodes == {0: "n0"} and topo[0].world_size == 1


def test_heartbeat_keeps_beating_while_the_main_thread_is_stuck() -> None:
    """A hang shows as heartbeats whose step no longer moves."""
    sink = ListSink()
    mon = _monitor(sink, torch.nn.Linear(2, 2))
    mon.step(loss=1.0)
    stuck = threading.Event()
    stuck.wait(0.4)  # the "collective" that never returns
    mon.close()
    beats = sink.of(Heartbeat)
    assert len(beats) >= 3
    assert {b.step for b in beats[1:]} == {1}
    assert beats[-1].ts > beats[1].ts
    assert time.time() >= beats[-1].ts
