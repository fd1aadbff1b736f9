"""The worker's durable state: detector snapshots on a compacted changelog topic.

A snapshot is everything the worker knows that is not in Kafka's offsets:
the detection pipeline (detectors, correlator with its open incidents,
node->job index) and the event clock's per-partition watermarks and held
records. It is pickled (detectors keep plain, picklable state, see
detectors.base), compressed, and written under the worker's key to the
compacted `worker-state` topic *inside the same transaction* as the outputs
and input offsets it belongs to, so after a crash the restored state and
the committed offsets always match: nothing lost, nothing repeated.

Compaction keeps only the newest snapshot per key, so restoring reads one
value per worker however long it has run.
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import msgspec

from detectors.pipeline import DetectionPipeline
from schemas.codec import AnyRecord
from streams.worker.watermark import PartitionTime

FORMAT = 3


@dataclass
class Snapshot:
    """What a worker restores on start: the pipeline and its partitions' clocks."""

    pipeline: DetectionPipeline
    parts: dict[Hashable, PartitionTime[Any]]
    buffer: list[tuple[float, int, Any]]  # accepted records waiting for the watermark
    format: int = FORMAT


_BUFFER = msgspec.msgpack.Encoder()
_UNBUFFER = msgspec.msgpack.Decoder(list[tuple[float, int, AnyRecord]])  # type: ignore[valid-type]


def dump(snapshot: Snapshot) -> bytes:
    """Pickle and compress (fast level: snapshots are on the worker's hot loop).

    The buffered records (thousands while a backlog is read) go as one
    msgpack blob: pickling records one by one cost 30x more.
    """
    packed = Snapshot(snapshot.pipeline, snapshot.parts, _BUFFER.encode(snapshot.buffer))  # type: ignore[arg-type]
    return zlib.compress(pickle.dumps(packed, protocol=pickle.HIGHEST_PROTOCOL), 1)


def load(blob: bytes) -> Snapshot | None:
    """A snapshot back, or None when it is from another format (start fresh rather than crash)."""
    try:
        snap = pickle.loads(zlib.decompress(blob))  # noqa: S301 - our own topic, written by this code
    except Exception:
        return None
    if not isinstance(snap, Snapshot) or snap.format != FORMAT:
        return None
    snap.buffer = _UNBUFFER.decode(snap.buffer) if isinstance(snap.buffer, bytes) else snap.buffer
    return snap
