"""Reading a whole topic as it is now, for tests that check what a real process wrote to the real broker."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from trainguard.schemas.codec import Codec
from trainguard.streams import kafka_io


def read_all(kafka: str, topic: str, codec: Codec) -> list[Any]:
    """Every record of `topic` now, decoded."""
    consumer = kafka_io.consumer(kafka_io.as_broker(kafka))
    try:
        return [codec.decode(m.value) for m in kafka_io.read_to_end(consumer, kafka_io.partitions_for(consumer, topic))]
    finally:
        consumer.close()


def read_until(kafka: str, topic: str, *, until: Callable[[list[Any]], bool], timeout_s: float = 90.0) -> list[Any]:
    """Every committed record of `topic`, re-read each second until `until(records)` holds or `timeout_s` passes
    (then what is there: the caller's assertion says what was missing)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = read_all(kafka, topic, Codec())
        if until(got) or time.monotonic() > deadline:
            return got
        time.sleep(1.0)
