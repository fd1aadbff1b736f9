"""Reading a whole topic as it is now, for tests that check what a real process wrote to the real broker."""

from __future__ import annotations

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
