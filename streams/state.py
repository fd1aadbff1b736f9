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
from dataclasses import dataclass
from collections.abc import Hashable
from typing import Any

from detectors.pipeline import DetectionPipeline
from streams.watermark import PartitionTime

FORMAT = 2


@dataclass
class Snapshot:
    """What a worker restores on start: the pipeline and its partitions' clocks."""

    pipeline: DetectionPipeline
    parts: dict[Hashable, PartitionTime[Any]]
    buffer: list[tuple[float, int, Any]]  # accepted records waiting for the watermark
    format: int = FORMAT


def dump(snapshot: Snapshot) -> bytes:
    """Pickle and compress (fast level: snapshots are on the worker's hot loop)."""
    return zlib.compress(pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL), 1)


def load(blob: bytes) -> Snapshot | None:
    """A snapshot back, or None when it is from another format (start fresh rather than crash)."""
    try:
        snap = pickle.loads(zlib.decompress(blob))  # noqa: S301 - our own topic, written by this code
    except Exception:
        return None
    return snap if isinstance(snap, Snapshot) and snap.format == FORMAT else None
