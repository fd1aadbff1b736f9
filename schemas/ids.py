"""Deterministic ids: the same finding, incident or decision seen again gets the same id.

A replay, a restart or a redelivery must produce the ids it produced before,
so the action journal's dedup holds; the id is a short hash of what was
found. Detectors, the correlator, the worker and act all derive ids this way.
"""

from __future__ import annotations

import hashlib


def anomaly_id(*parts: object) -> str:
    """A deterministic id: the same finding on a replay gets the same id.

    >>> anomaly_id("nan", "j", 5.0) == anomaly_id("nan", "j", 5.0), len(anomaly_id("x"))
    (True, 20)
    """
    raw = "|".join(str(p) for p in parts).encode()
    return hashlib.blake2b(raw, digest_size=10).hexdigest()
