"""`trainguard collect` end to end against the real broker.

No GPU exists here: the real pynvml fails to initialise, which must show up
as `nvml_ok=False` samples (unobserved, never healthy). RDMA reads the
fixture sysfs tree; a training log file is followed for real.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainguard.schemas.records import LogEvent, NodeGpuSample, RdmaSample
from trainguard.schemas.topics import Topics

pytestmark = pytest.mark.broker
FIXTURE = Path(__file__).parents[2] / "fixtures" / "sysfs" / "class" / "infiniband"


def test_collect_publishes_gpu_rdma_and_log_events(kafka: str, topic_prefix: str, tmp_path: Path,
                                                   read_back: Callable[..., list[Any]]) -> None:
    log_file = tmp_path / "train.log"
    log_file.write_text("")
    env = {"TRAINGUARD_TOPICS__PREFIX": topic_prefix, "TRAINGUARD_BROKER__BOOTSTRAP": kafka,
           "TRAINGUARD_COLLECTORS__SPOOL_DIR": str(tmp_path / "spool"), "NODE_NAME": "node-a",
           "TRAINGUARD_COLLECTORS__GPU_INTERVAL_S": "0.5", "TRAINGUARD_COLLECTORS__LOG_INTERVAL_S": "0.2",
           "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}
    proc = subprocess.Popen([sys.executable, "-m", "trainguard.cli", "collect", "--no-kernel-log", "--duration", "4",
                             "--rdma-root", str(FIXTURE), "--log-file", str(log_file)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    topics = Topics(topic_prefix)
    assert read_back(kafka, [topics.name("gpu")], expect=1)  # running: the follower is at the file's end
    with log_file.open("a") as f:
        f.write("[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "0 left spooled" in out
    gpu = read_back(kafka, [topics.name("gpu")], expect=4)
    assert len(gpu) >= 4 and all(isinstance(s, NodeGpuSample) for s in gpu)
    assert all(not s.nvml_ok and s.error and s.node == "node-a" for s in gpu)
    rdma = read_back(kafka, [topics.name("rdma")], expect=2)
    assert all(isinstance(s, RdmaSample) and len(s.ports) == 2 for s in rdma)
    logs = read_back(kafka, [topics.name("logs")], expect=1)
    assert [(e.category, e.rank) for e in logs if isinstance(e, LogEvent)] == [("cuda", 0)]
