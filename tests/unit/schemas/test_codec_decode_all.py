"""`Codec.decode_all`: a whole batch in one tight loop, or None whenever one payload needs `decode`'s handling."""

from __future__ import annotations

import json

import pytest

from trainguard.schemas import Codec, GpuStats, Heartbeat, NodeGpuSample, TrainingStep
from trainguard.schemas.codec import CHECK_RUN

CODEC = Codec()
GOOD = [CODEC.encode(r) for r in (
    Heartbeat(ts=1.0, job="j", rank=0, node="n0"),
    TrainingStep(ts=2.0, job="j", rank=1, node="n1", step=3, loss=float("nan")),
    NodeGpuSample(ts=3.0, node="n0", gpus=[GpuStats(index=i, uuid=f"GPU-{i}") for i in range(8)]),
)]


def test_a_clean_batch_decodes_exactly_as_one_by_one() -> None:
    batch = GOOD * 50
    fast = CODEC.decode_all(batch)
    assert fast is not None
    assert [CODEC.encode(r) for r in fast] == [CODEC.encode(CODEC.decode(v)) for v in batch] == batch  # NaN != NaN
    assert CODEC.decode_all([]) == []


def _beat(**changes: object) -> bytes:
    value = json.loads(GOOD[0])
    value.update(changes)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


@pytest.mark.parametrize("odd", [
    None,  # a tombstone
    b'{"type":"heartbeat"',  # malformed
    _beat(rank="zero"),  # invalid
    _beat(schema_version=99),  # another schema version
    _beat(node="n\u202e0"),  # a possible bad name (non-ASCII)
    _beat(node="n\\u001b0"),  # an escape, even a harmless one, takes the walk
    _beat(job="j" * (1 << 20)),  # over the size limit
], ids=["tombstone", "malformed", "invalid", "version", "bidi", "escape", "oversize"])
def test_one_payload_that_needs_decode_sends_the_whole_batch_one_by_one(odd: bytes | None) -> None:
    assert CODEC.decode_all([*GOOD, odd, *GOOD]) is None


@pytest.mark.parametrize("at", [CHECK_RUN - 1, CHECK_RUN, 3 * CHECK_RUN + 5, 4 * CHECK_RUN - 1])
def test_the_bytes_are_checked_run_by_run_and_every_run_counts(at: int) -> None:
    """A batch of four runs with one bad name at a run's edge or inside a later run: still one by one."""
    batch = (GOOD * (4 * CHECK_RUN))[:4 * CHECK_RUN]
    batch[at] = _beat(node="n\u202e0")
    assert CODEC.decode_all(batch) is None


def test_the_size_limit_is_per_payload_not_per_batch() -> None:
    small = Codec(max_bytes=len(max(GOOD, key=len)))
    assert small.decode_all(GOOD * 20) is not None  # the batch is far over the limit, each payload is not
