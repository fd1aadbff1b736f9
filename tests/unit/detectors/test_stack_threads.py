"""Per-thread stack dumps: the main thread speaks for its rank, monitoring threads are ignored."""

from __future__ import annotations

from detectors.hang import HangDetector
from schemas import Heartbeat, StackSample, TrainingStep

BOOT = ["_bootstrap (/usr/lib/python3.11/threading.py:995)", "_bootstrap_inner (/usr/lib/python3.11/threading.py:1038)",
        "run (/usr/lib/python3.11/threading.py:975)"]
HEARTBEAT = BOOT + ["_beat (/site/collectors/training_hook.py:201)", "wait (/usr/lib/python3.11/threading.py:622)"]
PUBLISHER = BOOT + ["_run (/site/collectors/publisher.py:110)", "_drain (/site/collectors/publisher.py:150)"]
WAITING = ["<module> (train.py:120)", "main (train.py:80)", "backward (torch/_tensor.py:625)",
           "_engine_run_backward (torch/autograd/graph.py:823)"]
STUCK = ["<module> (train.py:120)", "main (train.py:75)", "sleep (train.py:76)"]


def test_hang_is_localised_by_main_threads_despite_noisy_monitoring_threads() -> None:
    det = HangDetector(floor_s=8.0, warmup_floor_s=8.0, warmup_steps=3)
    nodes = {0: "n0", 1: "n1", 2: "n2", 3: "n3"}
    t = 0.0
    for step in range(1, 40):
        t = step * 0.2
        for rank, node in nodes.items():
            det.observe(TrainingStep(ts=t, job="j", rank=rank, node=node, step=step, loss=1.0, step_time_s=0.2))
    for rank, node in nodes.items():  # one dump per rank, one sample per thread, main thread in the middle
        frames = STUCK if rank == 2 else WAITING
        for thread in (HEARTBEAT, frames, PUBLISHER if rank % 2 else HEARTBEAT[:-1]):
            det.observe(StackSample(ts=t + 3.0, job="j", rank=rank, node=node, frames=thread))
    found = []
    for k in range(1, 40):
        now = t + k * 0.5
        for rank, node in nodes.items():
            det.observe(Heartbeat(ts=now, job="j", rank=rank, node=node, step=39))
        found += det.tick(now)
    assert found and found[0].kind == "hang"
    assert found[0].nodes == ["n2"] and found[0].evidence.get("localised_by") == "stacks"
