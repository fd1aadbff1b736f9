"""Topic layout and message keys."""

from __future__ import annotations

import pytest

from trainguard.schemas import CheckpointEvent, Heartbeat, NodeGpuSample, RdmaSample, TrainingStep
from trainguard.schemas.topics import Topics, key_for


def test_training_events_of_a_job_share_one_key() -> None:
    step = TrainingStep(ts=1.0, job="llama", rank=5, node="n3", step=1, loss=1.0)
    beat = Heartbeat(ts=1.0, job="llama", rank=7, node="n4")
    assert key_for(step) == key_for(beat) == b"llama"


def test_hardware_samples_are_keyed_by_node() -> None:
    assert key_for(NodeGpuSample(ts=1.0, node="n3", job="llama")) == b"llama"  # co-partitioned with its job
    assert key_for(NodeGpuSample(ts=1.0, node="n3")) == b"n3"
    assert key_for(RdmaSample(ts=1.0, node="n3")) == b"n3"


def test_topics_carry_the_prefix() -> None:
    topics = Topics("prod.")
    assert topics.for_record(CheckpointEvent(ts=1.0, job="j", step=1, path="p")) == "prod.checkpoints"
    assert topics.for_record(Heartbeat(ts=1.0, job="j", rank=0, node="n")) == "prod.training"
    assert topics.logical("prod.gpu") == "gpu"
    with pytest.raises(KeyError):
        topics.name("nope")
