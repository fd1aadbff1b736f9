"""Lightning and Transformers runs reported by trainguard's callbacks: the worker finds their NaN, a restart resumes.

Real parts: the frameworks (tiny models, CPU), torch, the callbacks, the
every-step checkpoint manager, the Kafka broker and a `trainguard worker`
process. Each run is a process of its own (`framework_train_script.py`); its
step 6 loss is NaN (in the graph, so the weights go NaN too). The worker must
open a `nan` incident for that job at step 6. The job is then restarted as
the agent restarts it (`TRAINGUARD_RESUME_STEP` = the newest checkpoint before
the NaN, read from the checkpoints topic, `TRAINGUARD_ATTEMPT=1`): the new
process must announce it restored that step from memory and train on from
step 6 with finite losses.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from processes import stop_all

from trainguard.schemas import Codec
from trainguard.schemas.records import CheckpointEvent, Incident, TrainingStep
from trainguard.schemas.topics import Topics
from trainguard.streams import kafka_io
from trainguard.streams.admin import ensure_topics

pytestmark = [pytest.mark.e2e, pytest.mark.broker]
SCRIPT = Path(__file__).parent / "framework_train_script.py"
NAN_AT = 6


def read(kafka: str, topic: str) -> list[object]:
    consumer = kafka_io.consumer(kafka_io.as_broker(kafka))
    try:
        parts = kafka_io.partitions_for(consumer, topic)
        return [Codec().decode(m.value) for m in kafka_io.read_to_end(consumer, parts)]
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def fleet(kafka: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """One worker for the module's runs (its own topic prefix)."""
    tmp = tmp_path_factory.mktemp("callbacks")
    prefix = f"cb{os.getpid()}."
    topics = Topics(prefix)
    ensure_topics(kafka_io.as_broker(kafka), topics.all(), partitions=1, replication=1, configs=topics.configs(),
                  partitions_of=topics.partitions(1))
    env = {**os.environ, "TRAINGUARD_BROKER__BOOTSTRAP": kafka, "TRAINGUARD_TOPICS__PREFIX": prefix,
           "TRAINGUARD_TOPICS__PARTITIONS": "1", "TRAINGUARD_WORKER__APP_ID": f"w-{prefix}",
           "TRAINGUARD_WORKER__STATE_DIR": str(tmp / "w"), "PYTHONUNBUFFERED": "1"}
    log = (tmp / "worker.log").open("ab")
    worker = subprocess.Popen([sys.executable, "-m", "trainguard.cli", "worker"], env=env, stdout=log,
                              stderr=subprocess.STDOUT, cwd=tmp)
    yield {"env": env, "topics": topics, "tmp": tmp}
    stop_all([worker], timeout_s=20)


def train(fleet: dict[str, object], framework: str, job: str, *, steps: int, nan_at: int = 0,
          resume: int | None = None) -> None:
    tmp = Path(str(fleet["tmp"]))
    env = {**fleet["env"], "TG_TEST_SHM": str(tmp / f"shm-{job}"),  # type: ignore[dict-item]
           "TRAINGUARD_COLLECTORS__SPOOL_DIR": str(tmp / f"spool-{job}")}
    if resume is not None:
        env.update(TRAINGUARD_RESUME_STEP=str(resume), TRAINGUARD_ATTEMPT="1")
    argv = [sys.executable, str(SCRIPT), framework, "--job", job, "--steps", str(steps), "--nan-at", str(nan_at),
            "--out", str(tmp / f"out-{job}")]
    done = subprocess.run(argv, env=env, cwd=tmp, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]


def wait_for_incident(kafka: str, topics: Topics, job: str, timeout_s: float = 120.0) -> Incident:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [r for r in read(kafka, topics.name("incidents")) if isinstance(r, Incident) and r.job == job]
        if found:
            return found[0]
        time.sleep(2)
    raise AssertionError(f"no incident for {job} within {timeout_s}s")


@pytest.mark.parametrize("framework", ["lightning", "huggingface"])
def test_the_callbacks_nan_is_detected_and_the_restart_resumes_from_the_every_step_checkpoint(
        kafka: str, fleet: dict[str, object], framework: str) -> None:
    topics: Topics = fleet["topics"]  # type: ignore[assignment]
    job = f"{framework}-job"
    train(fleet, framework, job, steps=9, nan_at=NAN_AT)
    incident = wait_for_incident(kafka, topics, job)
    assert (incident.kind, incident.step) == ("nan", NAN_AT)

    saved = [r.step for r in read(kafka, topics.name("checkpoints"))
             if isinstance(r, CheckpointEvent) and r.job == job and r.status == "saved" and r.tier == "memory"]
    # A step's copy is skipped, never queued, when the previous one is still being written (the step must
    # not wait: checkpoint/manager.py), which a loaded machine can cause; the NaN step is never copied.
    assert saved and max(saved) < NAN_AT
    resume = max(saved)
    train(fleet, framework, job, steps=3, resume=resume)

    records = read(kafka, topics.name("checkpoints")) + read(kafka, topics.name("training"))
    restored = [r for r in records if isinstance(r, CheckpointEvent) and r.job == job and r.status == "restored"]
    assert [(r.step, r.tier) for r in restored] == [(resume, "memory")]
    again = [r for r in records if isinstance(r, TrainingStep) and r.job == job and r.attempt == 1]
    assert [s.step for s in again] == [resume + 1, resume + 2, resume + 3]
    assert all(math.isfinite(s.loss) and s.grad_norm is not None and math.isfinite(s.grad_norm) for s in again)
    first = [r for r in records if isinstance(r, TrainingStep) and r.job == job and r.attempt == 0]
    assert [s.step for s in first] == list(range(1, 10)) and all(s.tokens > 0 for s in first)
