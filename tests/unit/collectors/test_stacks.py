"""Stack parsing on literal dumps, and the faulthandler path on a real process."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from trainguard.collectors.stacks import StackSampler, catches_signal, parse_faulthandler, parse_py_spy

FAULTHANDLER_DUMP = """Thread 0x00007f3a1b7fe640 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 331 in wait
  File "/w/trainguard/training_hook.py", line 170 in _beat

Current thread 0x00007f3a2d1b8740 (most recent call first):
  File "/w/torch/distributed/distributed_c10d.py", line 2050 in all_reduce
  File "/w/train.py", line 41 in train_step
  File "/w/train.py", line 60 in <module>
"""

PY_SPY_DUMP = """Process 4242: python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 4242 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:2050)
    train_step (train.py:41)
    <module> (train.py:60)
Thread 4250 (idle): "trainguard-heartbeat"
    wait (threading.py:331)
"""


def test_parse_faulthandler_outermost_first() -> None:
    stacks = parse_faulthandler(FAULTHANDLER_DUMP)
    assert [s.current for s in stacks] == [False, True]
    assert stacks[1].frames == ["<module> (/w/train.py:60)", "train_step (/w/train.py:41)",
                                "all_reduce (/w/torch/distributed/distributed_c10d.py:2050)"]


def test_parse_py_spy_outermost_first() -> None:
    stacks = parse_py_spy(PY_SPY_DUMP)
    assert [s.thread for s in stacks] == ["MainThread", "trainguard-heartbeat"]
    assert stacks[0].frames[-1] == "all_reduce (torch/distributed/distributed_c10d.py:2050)"
    assert stacks[0].frames[0] == "<module> (train.py:60)"


def test_signal_sampling_of_a_real_process(tmp_path: Path) -> None:
    """A real child registers the faulthandler signal like the hook does; we sample it while it sleeps."""
    script = (
        "import faulthandler, signal, sys, time, os\n"
        f"f = open({str(tmp_path)!r} + '/' + str(os.getpid()) + '.txt', 'a')\n"
        "faulthandler.register(signal.SIGUSR1, file=f, all_threads=True)\n"
        "def stuck_in_collective():\n"
        "    print('ready', flush=True); time.sleep(60)\n"
        "stuck_in_collective()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        assert catches_signal(child.pid, signal.SIGUSR1)
        stacks = StackSampler(stack_dir=tmp_path, use_py_spy=False).sample(child.pid)
        assert child.poll() is None  # sampling does not disturb the process
        assert stacks and stacks[0].frames[-1].startswith("stuck_in_collective (<string>:5)")
    finally:
        child.kill()
        child.wait()


def test_signal_is_not_sent_to_a_process_without_the_handler(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.2)
        assert not catches_signal(child.pid, signal.SIGUSR1)
        assert StackSampler(stack_dir=tmp_path, use_py_spy=False, timeout_s=0.5).sample(child.pid) == []
        assert child.poll() is None  # SIGUSR1 would have killed it
    finally:
        child.kill()
        child.wait()
