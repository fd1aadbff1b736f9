"""The garbage collector's share of the worker's batch hot path, with CPython's defaults and the worker's policy.

The bench fleet mix of `benchmarks.fleet_mix` (an 8-GPU sample per node per second,
steps and heartbeats of 8 ranks per node) is encoded once, then fed as
aiokafka `ConsumerRecord`s, fetches of 5,000, through the worker's own
`BatchLoop._process` (decode, event clock, detectors; no broker). Each run
builds a fresh task; the collector's time is measured directly
(`gc.callbacks`, CPU time between each collection's start and stop), as is
the CPU of the whole run. Runs alternate between:

* **defaults**: CPython's thresholds (700, 10, 10), nothing frozen;
* **worker policy**: `streams.worker.heap.settle_after_startup()`, what
  `trainguard worker` does before its loop starts.

    python -m benchmarks gc [--nodes 512,4096] [--seconds 20] [--rounds 2]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

from aiokafka.structs import ConsumerRecord, TopicPartition

from benchmarks.fleet_mix import fleet_second
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.schemas.codec import Codec
from trainguard.schemas.topics import Topics, key_for
from trainguard.settings import BrokerSettings, load_settings
from trainguard.streams.worker import heap
from trainguard.streams.worker.batch_loop import BatchLoop
from trainguard.streams.worker.skew import ClockSkewEstimator
from trainguard.streams.worker.tasks import NodeJobTable, TaskFactory
from trainguard.streams.worker.watermark import EventClock

TOPICS = Topics("gcb.")
FETCH = 5000
Raw = tuple[str, int, bytes, bytes, int]  # topic, offset, key, value, timestamp (ms)


def encoded_mix(nodes: int, seconds: int) -> list[Raw]:
    """The bench mix for `nodes` nodes and `seconds` of event time, encoded, with offsets per topic."""
    codec, offsets, out = Codec(), dict[str, int](), []
    for second in range(seconds):
        t = 1_000_000.0 + second
        for record in fleet_second(nodes, t, second):
            topic = TOPICS.for_record(record)
            offset = offsets.get(topic, 0)
            offsets[topic] = offset + 1
            out.append((topic, offset, key_for(record), codec.encode(record), int(t * 1000)))
    return out


class GcClock:
    """CPU seconds the collector spends, from `gc.callbacks`."""

    def __init__(self) -> None:
        self.spent = 0.0
        self._started = 0.0

    def __call__(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            self.spent += time.process_time() - self._started


def hot_loop(*, like_worker: bool = False) -> BatchLoop:
    """A worker's batch loop with task 0 built (the default detectors), no broker: its `_process` is the hot path.

    `like_worker` builds the task as `trainguard worker` does from its settings
    (the event clock's bounds and each host's clock-skew estimator); by default
    the estimator is left out, as this benchmark's figures always had it.
    """
    settings = load_settings()
    w = settings.worker
    factory = TaskFactory(topics=TOPICS, partitions=1,
                          new_pipeline=lambda: DetectionPipeline.from_settings(settings.detectors),
                          new_clock=EventClock, table=NodeJobTable())
    if like_worker:
        factory.new_clock = lambda: EventClock(max_ahead_s=w.max_ahead_s, idle_after_s=w.idle_after_s,
                                               confirm_within=w.confirm_within)
        factory.new_skew = lambda: ClockSkewEstimator(bound_s=w.clock_skew_bound_s)
    loop = BatchLoop(broker=BrokerSettings(bootstrap="unused:9092"), topics=TOPICS, factory=factory, group_id="gcb")
    loop.task(0)
    return loop


def as_fetch(raw: Sequence[Raw]) -> dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]:
    """One fetch as aiokafka's `getmany` returns it: partition 0 of each topic, its records in offset order."""
    fetched: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]] = {}
    for topic, offset, key, value, ts in raw:
        fetched.setdefault(TopicPartition(topic, 0), []).append(ConsumerRecord(
            topic=topic, partition=0, offset=offset, timestamp=ts, timestamp_type=0, key=key, value=value,
            checksum=None, serialized_key_size=len(key), serialized_value_size=len(value), headers=()))
    return fetched


def drain(raw: Sequence[Raw], *, policy: bool) -> tuple[float, float]:
    """(CPU seconds, collector CPU seconds) of one fresh task processing `raw` in fetches."""
    loop = hot_loop()
    old = heap.settle_after_startup() if policy else None
    clock = GcClock()
    gc.callbacks.append(clock)
    started = time.process_time()
    try:
        for i in range(0, len(raw), FETCH):
            loop._process(as_fetch(raw[i:i + FETCH]))  # noqa: SLF001 - the hot path itself, without a broker
        return time.process_time() - started, clock.spent
    finally:
        gc.callbacks.remove(clock)
        if old is not None:
            heap.restore(old)
        gc.collect()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_gc", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="512,4096", help="comma-separated fleet sizes (default: %(default)s)")
    parser.add_argument("--seconds", type=int, default=20, help="seconds of the mix per run (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the two modes (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        sizes = [int(n) for n in args.nodes.split(",")]
    except ValueError:
        parser.error(f"--nodes: expected comma-separated integers, got {args.nodes!r}")
    print(f"the collector's share of the batch hot path (median of {args.rounds} alternating runs each); "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'nodes':>6} {'events':>8} {'mode':>14} {'events/CPU-s':>13} {'gc CPU':>8} {'gc share':>9}")
    for nodes in sizes:
        raw = encoded_mix(nodes, args.seconds)
        runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for _ in range(args.rounds):
            for policy in (False, True):
                runs[policy].append(drain(raw, policy=policy))
        for policy, label in ((False, "defaults"), (True, "worker policy")):
            cpu = statistics.median(c for c, _ in runs[policy])
            spent = statistics.median(g for _, g in runs[policy])
            share = statistics.median(g / c for c, g in runs[policy])
            print(f"{nodes:>6} {len(raw):>8,} {label:>14} {len(raw) / cpu:>13,.0f} {spent:>7.3f}s {share:>8.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
