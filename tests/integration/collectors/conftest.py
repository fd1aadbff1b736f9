"""Fixtures for collector integration tests: reading back what reached the broker."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kafka import KafkaConsumer

from trainguard.schemas.codec import Codec


def read_records(servers: str, topics: list[str], *, expect: int, timeout_s: float = 30.0) -> list[Any]:
    """Consume `topics` from the beginning until `expect` records arrived (or time runs out)."""
    consumer = KafkaConsumer(*topics, bootstrap_servers=servers, auto_offset_reset="earliest",
                             enable_auto_commit=False, group_id=None, consumer_timeout_ms=1000)
    codec = Codec()
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < expect and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                out.extend(codec.decode(m.value) for m in batch)
    finally:
        consumer.close()
    return out


@pytest.fixture
def read_back() -> Callable[..., list[Any]]:
    """`read_back(servers, topics, expect=N)`: the decoded records on those topics."""
    return read_records
