"""A big snapshot is split across changelog keys and joined back; a torn one is never half-restored."""

from __future__ import annotations

import os

from trainguard.streams.worker.snapshot import CHUNK_BYTES, assemble, chunk_key, owner_of, pieces

KEY = b"w.detect/task-3"


def test_a_small_snapshot_is_one_message_under_its_own_key() -> None:
    assert pieces(KEY, b"small") == [(KEY, b"small")]
    assert assemble(KEY, dict(pieces(KEY, b"small"))) == b"small"


def test_a_big_snapshot_is_split_under_the_message_limit_and_joined_back() -> None:
    blob = os.urandom(3 * CHUNK_BYTES + 17)
    messages = pieces(KEY, blob)
    assert len(messages) == 5 and messages[-1][0] == KEY  # four chunks, then the manifest
    assert all(len(value) <= CHUNK_BYTES for _, value in messages)
    assert {owner_of(k) for k, _ in messages} == {KEY}
    assert assemble(KEY, dict(messages)) == blob


def test_a_missing_chunk_or_a_chunk_of_another_snapshot_restores_nothing() -> None:
    blob, older = os.urandom(2 * CHUNK_BYTES + 1), os.urandom(2 * CHUNK_BYTES + 1)
    values = dict(pieces(KEY, blob))
    del values[chunk_key(KEY, 1)]
    assert assemble(KEY, values) is None
    mixed = dict(pieces(KEY, blob))
    mixed[chunk_key(KEY, 0)] = dict(pieces(KEY, older))[chunk_key(KEY, 0)]
    assert assemble(KEY, mixed) is None


def test_the_owner_of_a_key_is_its_task_key() -> None:
    assert owner_of(b"w.detect/task-3#12") == KEY[:-1] + b"3" and owner_of(b"g/task-1") == b"g/task-1"
    assert owner_of(b"g#x/task-1") == b"g#x/task-1"  # a group id with '#' in it is not a chunk
