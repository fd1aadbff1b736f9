"""The training hook on a real (tiny, CPU) torch model, publishing into a list."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import pytest
import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fakes import ListSink

from trainguard.schemas.codec import Codec
from trainguard.schemas.records import CheckpointEvent, Heartbeat, JobTopology, PhaseChange, TrainingStep
from trainguard.schemas.signing import KeyRing, write_private_key
from trainguard.training_hook import TrainingMonitor, attempt_signer, param_checksum

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


def test_the_hooks_default_publisher_signs_with_the_attempt_key_the_agent_handed_over(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The signer comes from the file the agent wrote (path and id in the environment); no file: unsigned,
    an unreadable one: unsigned and said, never a crash of the training."""
    key = Ed25519PrivateKey.generate()
    write_private_key(tmp_path / "0-ab.key", key)
    env = {"TRAINGUARD_ATTEMPT_KEY_FILE": str(tmp_path / "0-ab.key"), "TRAINGUARD_ATTEMPT_KEY_ID": "j/0/n1/ab"}
    signer = attempt_signer(env)
    assert signer is not None and signer.key_id == "j/0/n1/ab"
    assert KeyRing({"j/0/n1/ab": key.public_key()}).check(b"v", signer.headers(b"v")) == ("j/0/n1/ab", "")
    assert attempt_signer({}) is None
    (tmp_path / "bad.key").write_text("not a key")
    assert attempt_signer({"TRAINGUARD_ATTEMPT_KEY_FILE": str(tmp_path / "bad.key")}) is None
    assert "attempt key unusable" in caplog.text
    mon = TrainingMonitor(job="j", env={**ENV, "RANK": "0", **env,
                                        "TRAINGUARD_COLLECTORS__SPOOL_DIR": str(tmp_path / "spool"),
                                        "TRAINGUARD_BROKER__BOOTSTRAP": "127.0.0.1:1"},
                          install_stack_signal=False, heartbeat_interval_s=60)
    try:
        used = mon._sink._signer  # type: ignore[attr-defined]  # what every record it publishes is signed with
        assert used.key_id == "j/0/n1/ab"
        assert KeyRing({"j/0/n1/ab": key.public_key()}).check(b"v", used.headers(b"v")) == ("j/0/n1/ab", "")
    finally:
        mon.close(timeout_s=0.1)
