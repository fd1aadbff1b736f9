"""Bounds in the schema: absurd numbers and hostile names are refused where they are decoded (issue 21)."""

from __future__ import annotations

import json

import pytest

from trainguard.schemas import Codec, DecodeError
from trainguard.schemas.bounds import MAX_NAME_CHARS

STEP = {"type": "step", "ts": 1.7e9, "job": "llm", "rank": 0, "node": "n0", "step": 1, "loss": 2.0}
BEAT = {"type": "heartbeat", "ts": 1.7e9, "job": "llm", "rank": 0, "node": "n0"}

# (what, the payload, the field the reason must name): the list of issue 21, and its neighbours.
ABSURD = [
    ("negative step", {**STEP, "step": -1}, "step"),
    ("huge step", {**STEP, "step": 10**18}, "step"),
    ("negative rank", {**STEP, "rank": -3}, "rank"),
    ("huge rank", {**STEP, "rank": 10**12}, "rank"),
    ("negative attempt", {**STEP, "attempt": -1}, "attempt"),
    ("timestamp 0", {**STEP, "ts": 0}, "ts"),
    ("timestamp -1e308", {**STEP, "ts": -1e308}, "ts"),
    ("timestamp 1e308", {**BEAT, "ts": 1e308}, "ts"),
    ("NUL in a job", {**STEP, "job": "llm\x00"}, "job"),
    ("right-to-left override in a job", {**STEP, "job": "llm\u202egpj"}, "job"),
    ("ESC in a node", {**BEAT, "node": "n0\x1b[2J"}, "node"),
    ("empty job on training", {**STEP, "job": ""}, "job"),
    ("empty job on a heartbeat", {**BEAT, "job": ""}, "job"),
    ("a million-character node", {**BEAT, "node": "n" * 1_000_000}, "node"),
    ("a name one past the bound", {**BEAT, "job": "j" * (MAX_NAME_CHARS + 1)}, "job"),
    ("negative world size", {"type": "topology", "ts": 1.7e9, "job": "llm", "world_size": -8}, "world_size"),
    ("negative GPU index", {"type": "gpu_sample", "ts": 1.7e9, "node": "n0", "gpus": [{"index": -1}]}, "gpus[0].index"),
    ("2000 GPUs on a node", {"type": "gpu_sample", "ts": 1.7e9, "node": "n0",
                             "gpus": [{"index": i % 8} for i in range(2000)]}, "gpus"),
    ("XID dated -1", {"type": "gpu_sample", "ts": 1.7e9, "node": "n0",
                      "xids": [{"gpu": 0, "code": 79, "ts": -1}]}, "xids[0].ts"),
    ("a rank's node with a NUL", {"type": "topology", "ts": 1.7e9, "job": "llm", "world_size": 1,
                                  "rank_nodes": {"0": "n\x00"}}, "rank_nodes"),
    ("RDMA device with a bidi isolate", {"type": "rdma_sample", "ts": 1.7e9, "node": "n0",
                                         "ports": [{"device": "mlx5\u2066", "port": 1}]}, "ports[0].device"),
]


@pytest.mark.parametrize(("what", "payload", "field"), ABSURD, ids=[a[0] for a in ABSURD])
def test_absurd_values_are_refused_naming_the_field(what: str, payload: dict[str, object], field: str) -> None:
    codec = Codec(max_bytes=4 << 20)  # a million-character name is under the size limit: the bound catches it
    with pytest.raises(DecodeError) as err:
        codec.decode(json.dumps(payload).encode())
    assert err.value.field.startswith(field), (what, str(err.value))


def test_a_hostile_name_is_said_in_words_not_as_a_regex() -> None:
    with pytest.raises(DecodeError) as err:
        Codec().decode(json.dumps({**STEP, "job": "llm\u202e"}).encode())
    assert "control or bidirectional character" in str(err.value) and "regex" not in str(err.value)


@pytest.mark.parametrize("name", ["llm-7b.run_3", "Ünïcödé-训练", "a" * MAX_NAME_CHARS, "n0:gpu/2 (test)"])
def test_real_names_pass(name: str) -> None:
    record = Codec().decode(json.dumps({**STEP, "job": name, "node": name}).encode())
    assert record.job == name and record.node == name


def test_the_bounds_pass_at_their_edges() -> None:
    codec = Codec()
    edge = codec.decode(json.dumps({**STEP, "step": 0, "rank": 0, "ts": 1e-3}).encode())
    assert (edge.step, edge.rank) == (0, 0)
    big = codec.decode(json.dumps({**STEP, "step": 1 << 40, "rank": (1 << 20) - 1, "ts": 1e10}).encode())
    assert big.step == 1 << 40


def test_findings_and_dead_letters_keep_their_unbounded_time() -> None:
    """A dead letter carries the broker's time of what it quarantines (0 from a hand-built message)."""
    letter = {"type": "dead_letter", "ts": 0.0, "source_topic": "t", "reason": "r", "original_b64": ""}
    assert Codec().decode(json.dumps(letter).encode()).ts == 0.0
