"""`benchmarks/gpu/run.sh` where no GPU is: it refuses in one line, and its `--cpu` dry run measures.

The dry run is the real script and the real code (NVML collector with the
real pynvml, a torch training loop with the real hook and checkpoint manager,
the scale-out benchmark against the real broker), on the CPU. Two fail-fast
paths need a GPU's absence to be certain on any machine: an empty PATH (no
nvidia-smi at all) and, for "nvidia-smi sees a GPU but torch does not", a
stand-in nvidia-smi (the one boundary faked: a script that lists a GPU) with
CUDA_VISIBLE_DEVICES empty, so torch sees none even on a GPU machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu" / "run.sh"
pytestmark = [pytest.mark.e2e, pytest.mark.broker]


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=400)


def test_without_a_gpu_it_stops_at_once_with_one_line(tmp_path: Path) -> None:
    done = _run(env={"PATH": str(tmp_path / "empty"), "OUT": str(tmp_path / "out")})
    assert done.returncode == 2
    assert done.stderr.strip() == "benchmarks/gpu/run.sh: no NVIDIA GPU here (nvidia-smi not found); nothing to measure"
    assert not (tmp_path / "out").exists()


def test_a_gpu_that_torch_cannot_see_is_named(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'GPU 0: stand-in (UUID: GPU-0)'\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": "",
           "PYTHON": sys.executable, "OUT": str(tmp_path / "out")}
    done = _run(env=env)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "benchmarks/gpu/run.sh: nvidia-smi sees a GPU but torch does not (torch built without CUDA, or a driver mismatch)"]


def test_the_cpu_dry_run_writes_every_figure(kafka: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(out), "CUDA_VISIBLE_DEVICES": ""}
    done = _run("--cpu", env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    measure = json.loads((out / "measure.json").read_text())
    assert measure["cpu_dry_run"] is True
    nvml = measure["nvml"]
    assert nvml["samples"] == 20
    assert (nvml["nvml_ok"] == 20 and nvml["gpus"] > 0) or (nvml["nvml_ok"] == 0 and nvml["error"])
    steps = measure["steps"]
    assert steps["slots_pinned"] is False  # no GPU path on the CPU
    modes = steps["modes"]
    assert set(modes) == {"base", "hook", "ckpt", "hook+ckpt"}
    for mode, row in modes.items():
        assert row["steps"] == 6 and row["step_s_mean"] > 0
        assert (row["hook_s_per_step"] > 0) == ("hook" in mode)
        assert (row["ckpt_launch_s_per_step"] > 0) == ("ckpt" in mode)  # only those modes snapshot
        assert row["snapshots"] + row["snapshots_skipped"] == (6 if "ckpt" in mode else 0)
    scale = json.loads((out / "scaleout.json").read_text())
    assert [r["workers"] for r in scale["runs"]] == [1] and scale["runs"][0]["events"] > 0
    summary = (out / "summary.txt").read_text()
    assert "CPU DRY RUN" in summary and "1 worker(s) " in summary
    assert summary == done.stdout.split("took ")[0]
