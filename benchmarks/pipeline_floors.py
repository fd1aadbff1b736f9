"""`bench_pipeline`'s floors: the backlog read and decoded and nothing else, three ways, and the side-by-side print.

Decode only (the values already in memory, our codec), aiokafka's consumer
+ decode (the client the worker runs), and confluent-kafka's (librdkafka)
+ decode when the `bench` extra is installed. Each is events per CPU-second
of this process (librdkafka's threads included): the most any consumer of
this backlog could do, which the worker is quoted against.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioPartition

from benchmarks.fleet_mix import Backlog
from trainguard.schemas.codec import Codec

# The worker's fetch sizes (streams/worker/batch_loop.py), so every floor reads in batches as large.
PARTITION_FETCH_BYTES, FETCH_BYTES, MAX_RECORDS = 8 << 20, 64 << 20, 5000


def measure_floors(servers: str, backlog: Backlog) -> dict[str, float | None]:
    """Events per CPU-second of reading the backlog and decoding it, and nothing else, three ways.

    None for confluent-kafka when it is not installed (`pip install 'trainguard[bench]'`).
    """
    values = asyncio.run(_aiokafka_read(servers, backlog, keep=True))[1]
    return {"decode only": _decode_only(values),
            "confluent-kafka + decode": _confluent_read(servers, backlog),
            "aiokafka + decode": asyncio.run(_aiokafka_read(servers, backlog))[0]}


def _decode_only(values: list[bytes]) -> float:
    decode = Codec().decode
    started = time.process_time()
    for value in values:
        decode(value)
    return len(values) / max(1e-9, time.process_time() - started)


async def _aiokafka_read(servers: str, backlog: Backlog, *, keep: bool = False) -> tuple[float, list[bytes]]:
    """Read the whole backlog with aiokafka (no group), decoding every value: (events per CPU-s, values kept)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False,
                                max_partition_fetch_bytes=PARTITION_FETCH_BYTES, fetch_max_bytes=FETCH_BYTES)
    await consumer.start()
    kept: list[bytes] = []
    try:
        consumer.assign([AioPartition(t, p) for t, p in backlog.parts()])
        await consumer.seek_to_beginning()
        decode, seen, started = Codec().decode, 0, time.process_time()
        deadline = time.monotonic() + FLOOR_TIMEOUT_S
        while seen < backlog.events:
            within_deadline(deadline, seen, backlog)
            for records in (await consumer.getmany(timeout_ms=500, max_records=MAX_RECORDS)).values():
                for record in records:
                    if keep:
                        kept.append(record.value)
                    else:
                        decode(record.value)
                seen += len(records)
        return seen / max(1e-9, time.process_time() - started), kept
    finally:
        await consumer.stop()


def _confluent_read(servers: str, backlog: Backlog) -> float | None:
    """Read the whole backlog with confluent-kafka (librdkafka), decoding every value; None if not installed."""
    try:
        from confluent_kafka import OFFSET_BEGINNING, Consumer
        from confluent_kafka import TopicPartition as CkPartition
    except ImportError:
        return None
    consumer = Consumer({"bootstrap.servers": servers, "group.id": f"floor-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "max.partition.fetch.bytes": PARTITION_FETCH_BYTES,
                         "fetch.max.bytes": FETCH_BYTES})
    try:
        started = time.process_time()  # from the assignment: librdkafka's threads fetch from then on
        consumer.assign([CkPartition(t, p, OFFSET_BEGINNING) for t, p in backlog.parts()])
        decode, seen, deadline = Codec().decode, 0, time.monotonic() + FLOOR_TIMEOUT_S
        while seen < backlog.events:
            within_deadline(deadline, seen, backlog)
            for message in consumer.consume(num_messages=MAX_RECORDS, timeout=0.5):
                if message.error() is None:
                    decode(message.value() or b"")
                    seen += 1
        return seen / max(1e-9, time.process_time() - started)
    finally:
        consumer.close()


FLOOR_TIMEOUT_S = 300.0  # a floor that has not read the whole backlog by then never will


def within_deadline(deadline: float, seen: int, backlog: Backlog) -> None:
    """Raise when a reader of the backlog (a floor, a client comparison) is past its deadline, saying how far it got."""
    if time.monotonic() > deadline:
        raise RuntimeError(f"a reader read {seen:,} of the backlog's {backlog.events:,} events "
                           f"in {FLOOR_TIMEOUT_S:.0f} s")


def print_side_by_side(backlog: Backlog, nodes: int, floors: dict[str, float | None], worker_rate: float,
                       label: str = "worker, exactly-once") -> None:
    """The floors and the worker, events per CPU-second, with the worker's ratio to each."""
    print(f"events per CPU-second on one backlog of {backlog.events:,} events ({nodes} nodes; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores):")
    for name, rate in floors.items():
        if rate is None:
            print(f"  {name:28s}  (not installed: pip install 'trainguard[bench]')")
        else:
            print(f"  {name:28s} {rate:>9,.0f}   the worker is {worker_rate / rate:.2f}x this floor")
    print(f"  {label:28s} {worker_rate:>9,.0f}")
