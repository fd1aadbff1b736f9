"""The bench fleet: what a healthy fleet emits each second, and a backlog of it pre-loaded on the broker.

Every benchmark that needs fleet-shaped load uses this one mix (an 8-GPU
sample per node per second, optionally 8 RDMA ports, a step per rank every
`step_s`, a heartbeat per rank every 5 s), so their figures describe the same
traffic: `bench_pipeline` drains it through a worker and reads it back as
its floors, `bench_detectors`, `bench_scrape` and `bench_gc` feed it in-process.
`bench_scaleout` loads a many-job mix of its own through the same `preload`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer

from benchmarks.bench_codec import sample
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import Heartbeat, NodeGpuSample, RdmaPort, RdmaSample, Record, TrainingStep
from trainguard.schemas.topics import Topics, key_for
from trainguard.settings import load_settings
from trainguard.streams.admin import ensure_topics

Second = Callable[[float, int], Iterable[Record]]  # (event time, second number) -> that second's records
RANKS_PER_NODE = 8
HEARTBEAT_S = 5
# A healthy node's 8 RDMA ports (one 400 Gb/s NIC per GPU), each moving ~20 GB/s both ways.
RDMA_PORTS = [RdmaPort(device=f"mlx5_{i}", port=1, tx_bytes=10**15, rx_bytes=10**15, tx_bps=2e10, rx_bps=2e10)
              for i in range(RANKS_PER_NODE)]


def fleet_second(nodes: int, t: float, second: int, *, step_s: int = 10, rdma: bool = False,
                 job_nodes: int = 0) -> Iterator[Record]:
    """The events a healthy `nodes`-node fleet emits in one second of event time.

    One job spans the fleet, or, with `job_nodes`, the fleet splits into the
    fewest jobs of at most `job_nodes` nodes, all of one size but the last
    (ranks numbered within each job). With `rdma`, each node also reports its 8 RDMA ports.
    """
    template = sample()
    jobs = max(1, -(-nodes // job_nodes)) if job_nodes > 0 else 1
    per_job = -(-nodes // jobs)
    for n in range(nodes):
        node = f"node-{n:04d}"
        job = "bench" if jobs == 1 else f"bench-{n // per_job:03d}"
        yield NodeGpuSample(ts=t, node=node, job=job, gpus=template.gpus)
        if rdma:
            yield RdmaSample(ts=t, node=node, job=job, ports=RDMA_PORTS)
        first = (n % per_job) * RANKS_PER_NODE
        for r in range(first, first + RANKS_PER_NODE):
            if (second + r) % step_s == 0:
                yield TrainingStep(ts=t, job=job, rank=r, node=node, step=second // step_s, loss=2.1,
                                   grad_norm=0.9, step_time_s=float(step_s), tokens=4_194_304, mfu=0.41)
            if (second + r) % HEARTBEAT_S == 0:
                yield Heartbeat(ts=t, job=job, rank=r, node=node, step=second // step_s)


def events_per_node_s(step_s: int = 10, *, rdma: bool = False) -> float:
    """Events per node per second of the mix (1 GPU sample [+ 1 RDMA sample] + steps + heartbeats)."""
    return 1 + rdma + RANKS_PER_NODE / step_s + RANKS_PER_NODE / HEARTBEAT_S


def producer(servers: str) -> AIOKafkaProducer:
    """A producer built to load a broker fast (not started)."""
    # aiokafka, not kafka-python: kafka-python checksums record batches in pure
    # Python (about 1.3k of these 3 KB events/s here), far too slow to load a worker.
    return AIOKafkaProducer(bootstrap_servers=servers, acks=1, linger_ms=20, max_batch_size=1 << 20,
                            max_request_size=8 << 20)


async def send_all(kafka: AIOKafkaProducer, codec: Codec, topics: Topics, records: Iterable[Record],
                   *, flush: bool = True) -> int:
    """Send `records`, each to its topic under its key; how many were sent."""
    sent = 0
    for record in records:
        await kafka.send(topics.for_record(record), codec.encode(record), key=key_for(record))
        sent += 1
    if flush:
        await kafka.flush()
    return sent


def preload(servers: str, topics: Topics, count: int, second: Second) -> int:
    """Produce about `count` events, one second of `second(t, n)` after another from an hour ago; return how many."""

    async def run() -> int:
        kafka, sent, n, t0 = producer(servers), 0, 0, time.time() - 3600
        await kafka.start()
        try:
            while sent < count:
                sent += await send_all(kafka, Codec(), topics, second(t0 + n, n))
                n += 1
        finally:
            await kafka.stop()
        return sent

    return asyncio.run(run())


@dataclass(frozen=True)
class Backlog:
    """Events pre-loaded on fresh topics of their own prefix."""

    prefix: str
    events: int
    topics: Topics
    partitions: int  # of each topic
    rdma: bool = False  # whether the mix has RDMA samples (on a topic of their own)

    @property
    def names(self) -> list[str]:
        """The topics the backlog lies on (GPU samples, steps and heartbeats, and RDMA samples if any)."""
        kinds = ("gpu", "training", "rdma") if self.rdma else ("gpu", "training")
        return [self.topics.name(kind) for kind in kinds]

    def parts(self) -> list[tuple[str, int]]:
        """Every (topic, partition) of the backlog."""
        return [(t, p) for t in self.names for p in range(self.partitions)]


def load_backlog(servers: str, nodes: int, count: int, *, rdma: bool = False, job_nodes: int = 0) -> Backlog:
    """Fresh topics, pre-loaded with about `count` events of a `nodes`-node fleet (`fleet_second`'s options)."""
    prefix = f"bench{uuid.uuid4().hex[:6]}."
    topics, partitions = Topics(prefix), load_settings().topics.partitions
    ensure_topics(servers, topics.all(), partitions=partitions, replication=1)
    total = preload(servers, topics, count, lambda t, n: fleet_second(nodes, t, n, rdma=rdma, job_nodes=job_nodes))
    seconds = total // max(1, int(nodes * events_per_node_s(rdma=rdma)))
    print(f"  pre-loaded {total:,} events ({nodes} nodes x {seconds} s{', with RDMA' if rdma else ''})")
    return Backlog(prefix, total, topics, partitions, rdma)
