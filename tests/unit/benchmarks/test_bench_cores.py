"""Core planning for scale-out benchmarks, and pinning a real process's threads."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from benchmarks import cores


@pytest.mark.parametrize(("have", "workers", "reserve", "expected"), [
    (16, 8, 8, cores.CorePlan(shared=tuple(range(8)), workers=tuple(range(8, 16)))),
    (16, 1, 8, cores.CorePlan(shared=tuple(range(8)), workers=(8,))),
    (2, 1, 1, cores.CorePlan(shared=(0,), workers=(1,))),
    (2, 2, 1, None),  # no core left over for the broker
    (4, 1, 0, None),  # nothing shared: refused, the broker and the producer need somewhere to run
])
def test_plan_gives_each_worker_its_own_core_or_says_none(have: int, workers: int, reserve: int,
                                                          expected: cores.CorePlan | None) -> None:
    assert cores.plan(range(have), workers, reserve) == expected


def test_pin_holds_every_thread_of_a_running_process() -> None:
    mine = cores.available()
    target = mine[-1]
    code = "import threading, time; threading.Thread(target=time.sleep, args=(30,), daemon=True).start(); " \
           "time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 10
        while len(os.listdir(f"/proc/{proc.pid}/task")) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cores.pin(proc.pid, [target]) == 2
        for tid in os.listdir(f"/proc/{proc.pid}/task"):
            assert os.sched_getaffinity(int(tid)) == {target}
    finally:
        proc.kill()
        proc.wait()
