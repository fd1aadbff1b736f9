"""Per-thread stack dumps: the main thread speaks for its rank, monitoring threads are ignored."""

from __future__ import annotations

from trainguard.detectors.hang import HangDetector
from trainguard.schemas import Heartbeat, StackSample, TrainingStep

BOOT = ["_bootstrap (/usr/lib/python3.11/threading.py:995)", "_bootstrap_inner (/usr/lib/python3.11/threading.py:1038)",
        "run (/usr/lib/python3.11/threading.py:975)"]
HEARTBEAT = BOOT + ["_beat (/site/trainguard/training_hook.py:201)", "wait (/usr/lib/python3.11/threading.py:622)"]
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


def test_a_process_exit_is_not_a_hang_until_the_grace_passes() -> None:
    from trainguard.schemas import LogEvent

    det = HangDetector(floor_s=8.0, warmup_floor_s=8.0, warmup_steps=3, exit_grace_s=60.0)
    for step in range(1, 40):
        det.observe(TrainingStep(ts=step * 0.2, job="j", rank=0, node="n0", step=step, loss=1.0))
    det.observe(LogEvent(ts=8.0, node="n0", level="error", source="agent", message="process exited with code 1",
                         job="j", category="exit", exit_code=1))
    quiet = []
    for k in range(1, 200):  # the node stays reachable (heartbeats from its agent-side hook are gone)
        now = 8.0 + k * 0.5
        det.observe(Heartbeat(ts=now, job="j", rank=0, node="n0", step=39))
        quiet += det.tick(now)
        if now < 68.0:
            assert quiet == [], f"fired {now - 8.0:.1f}s after the exit"
    assert [a.kind for a in quiet] == ["hang"]  # still no progress after the grace: stuck
