"""A machine keeps its rank across an elastic restart; a standby takes the evicted machine's."""

from __future__ import annotations

from pathlib import Path

from trainguard.checkpoint.ranks import rank_hint, stable_ranks
from trainguard.checkpoint.store import Manifest


def test_claims_are_kept_and_the_gap_goes_to_the_standby() -> None:
    # join order: node-2 (was 2), a standby (no claim), node-0 (was 0), node-3 (was 3); node-1 was evicted
    assert stable_ranks([2, None, 0, 3]) == [2, 1, 0, 3]


def test_bad_or_duplicate_claims_fall_back_to_free_ranks() -> None:
    assert stable_ranks([5, 0, 0]) == [1, 0, 2]
    assert stable_ranks([None, None]) == [0, 1]


def test_the_hint_is_the_rank_whose_snapshot_the_memory_holds(tmp_path: Path) -> None:
    assert rank_hint(tmp_path) is None
    own = tmp_path / "own-3"
    own.mkdir()
    (own / "slot0.json").write_bytes(Manifest(job="j", rank=3, step=9, nbytes=64, checksum="c", layout=[],
                                              skeleton="").encode())
    assert rank_hint(tmp_path) == 3
    other = tmp_path / "own-1"
    other.mkdir()
    (other / "slot0.json").write_bytes(Manifest(job="j", rank=1, step=9, nbytes=64, checksum="c", layout=[],
                                                skeleton="").encode())
    assert rank_hint(tmp_path) is None  # two ranks' memory on one machine: no single claim
