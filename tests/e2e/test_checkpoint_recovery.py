"""Fast recovery with real torch processes: in-process rollback after a NaN, a lost machine's
shard restored from its peer backup. Two small DDP ranks over gloo; the c10d store lives here, as
torchrun's agent would host it. A rank's "machine" is its process plus its RAM directory: losing the
machine kills the process and deletes that directory. (No trainguard agent runs here: the agent's
part, relaunching on a standby, is what this test does by hand.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch.distributed as dist

WORKER = Path(__file__).with_name("ckpt_worker.py")
ROOT = Path(__file__).resolve().parents[2]


def _store() -> Any:
    return dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=60), wait_for_workers=False)


def _launch(rank: int, store: Any, mem: Path, out: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, str(WORKER), "--rank", str(rank), "--store", f"127.0.0.1:{store.port}",
                             "--mem", str(mem), "--node", f"node{rank}", "--out", str(out), *extra], env=env)


def _wait(procs: list[subprocess.Popen[bytes]], timeout_s: float = 120) -> None:
    deadline = time.time() + timeout_s
    for p in procs:
        assert p.wait(timeout=max(1.0, deadline - time.time())) == 0


def test_nan_rolls_back_in_process_to_the_step_before(tmp_path: Path) -> None:
    store = _store()
    outs = [tmp_path / f"r{r}.json" for r in range(2)]
    procs = [_launch(r, store, tmp_path / f"mem{r}", outs[r], "--steps", "10", "--nan-at", "6") for r in range(2)]
    _wait(procs)
    reports = [json.loads(o.read_text()) for o in outs]
    for rep in reports:
        assert [h["bad_step"] for h in rep["history"]] == [6]
        assert rep["restores"] == [{"step": 5, "tier": "memory", "rejected": []}]
        assert rep["steps"] == list(range(1, 7)) + list(range(6, 11))  # step 6 redone, same process
    # the rolled-back run ends exactly where a run without the NaN would
    clean = [tmp_path / f"c{r}.json" for r in range(2)]
    store2 = _store()
    _wait([_launch(r, store2, tmp_path / f"cmem{r}", clean[r], "--steps", "10") for r in range(2)])
    assert json.loads(clean[0].read_text())["final"] == reports[0]["final"] == reports[1]["final"]


def test_lost_machine_restores_its_shard_from_the_peer(tmp_path: Path) -> None:
    store = _store()
    outs = [tmp_path / f"r{r}.json" for r in range(2)]
    mems = [tmp_path / f"mem{r}" for r in range(2)]
    procs = [_launch(r, store, mems[r], outs[r], "--steps", "40", "--compute-s", "0.15") for r in range(2)]
    _wait_for_backup(mems[0] / "peer-t-1")  # rank 0 holds rank 1's backup (next-machine rule)
    time.sleep(1.0)
    procs[1].kill()  # the machine of rank 1 dies: its process and its memory
    procs[1].wait()
    shutil.rmtree(mems[1])
    replacement = _launch(1, store, tmp_path / "standby-mem", outs[1], "--steps", "40", "--compute-s", "0.15",
                          "--join")
    _wait([procs[0], replacement])
    survivor, standby = (json.loads(o.read_text()) for o in outs)
    assert standby["restores"][0]["tier"] == "peer"
    assert survivor["restores"][0]["tier"] == "memory"
    assert standby["restores"][0]["step"] == survivor["restores"][0]["step"] > 0
    assert standby["final"] == survivor["final"]  # both replicas continued from the same state
    assert standby["steps"][0] == standby["restores"][0]["step"] + 1


def _wait_for_backup(directory: Path, timeout_s: float = 60) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if list(directory.glob("slot*.json")):
            return
        time.sleep(0.2)
    raise AssertionError(f"no peer backup appeared in {directory}")


def test_fsdp_sharded_state_round_trips(tmp_path: Path) -> None:
    """FSDP2 (`fully_shard`) runs on the CPU over gloo here, so the real sharded state is used."""
    store = _store()
    outs = [tmp_path / f"f{r}.json" for r in range(2)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, str(WORKER.with_name("fsdp_worker.py")), "--rank", str(r),
                               "--store", f"127.0.0.1:{store.port}", "--mem", str(tmp_path / f"m{r}"),
                               "--out", str(outs[r])], env=env) for r in range(2)]
    _wait(procs)
    for out in outs:
        rep = json.loads(out.read_text())
        assert rep["changed_by_training"] and rep["sharded"]
        assert rep["local_params"] * 2 == rep["full_params"]  # each rank snapshots only its shard
        assert (rep["tier"], rep["step"], rep["equal"]) == ("memory", 2, True)
        assert (rep["peer_tier"], rep["peer_equal"]) == ("peer", True)
