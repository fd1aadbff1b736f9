"""What estimating each host's clock (`streams.worker.skew`) costs the worker's batch hot path.

The bench fleet mix of `benchmarks.fleet_mix` (an 8-GPU sample per node per second,
steps and heartbeats of 8 ranks per node), encoded once with message
timestamps, is fed through the worker's own `BatchLoop._process` (decode,
event clock, detectors; no broker), in fetches of 5,000, by fresh tasks
that alternate between no estimator (the baseline) and the worker's
`ClockSkewEstimator`. The figure is the same-run ratio of events per
CPU-second.

    python -m benchmarks skew [--nodes 512] [--seconds 40] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence

from aiokafka.structs import ConsumerRecord, TopicPartition

from benchmarks.bench_gc import FETCH, TOPICS, Raw, encoded_mix
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.settings import BrokerSettings, load_settings
from trainguard.streams.worker.batch_loop import BatchLoop
from trainguard.streams.worker.skew import ClockSkewEstimator
from trainguard.streams.worker.tasks import NodeJobTable, TaskFactory
from trainguard.streams.worker.watermark import EventClock


def drain(raw: Sequence[Raw], *, skew: bool) -> float:
    """CPU seconds of one fresh task processing `raw` in fetches, with or without the estimator."""
    detectors = load_settings().detectors
    factory = TaskFactory(topics=TOPICS, partitions=1, new_pipeline=lambda: DetectionPipeline.from_settings(detectors),
                          new_clock=EventClock, table=NodeJobTable(),
                          new_skew=(lambda: ClockSkewEstimator()) if skew else (lambda: None))
    loop = BatchLoop(broker=BrokerSettings(bootstrap="unused:9092"), topics=TOPICS, factory=factory, group_id="skb")
    loop.task(0)
    fetches = []
    for i in range(0, len(raw), FETCH):
        fetched: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]] = {}
        for topic, offset, key, value, ts in raw[i:i + FETCH]:
            fetched.setdefault(TopicPartition(topic, 0), []).append(ConsumerRecord(
                topic=topic, partition=0, offset=offset, timestamp=ts, timestamp_type=0, key=key, value=value,
                checksum=None, serialized_key_size=len(key), serialized_value_size=len(value), headers=()))
        fetches.append(fetched)
    started = time.process_time()
    for fetched in fetches:
        loop._process(fetched)  # noqa: SLF001 - the hot path itself, without a broker
    return time.process_time() - started


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_skew", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=512, help="fleet size (default: %(default)s)")
    parser.add_argument("--seconds", type=int, default=40, help="seconds of the mix per run (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the two modes (default: %(default)s)")
    args = parser.parse_args(argv)
    raw = encoded_mix(args.nodes, args.seconds)
    drain(raw, skew=True)  # warm-up (imports, caches), not counted
    runs: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.rounds):
        for skew in (False, True):
            runs[skew].append(drain(raw, skew=skew))
    print(f"clock estimates on the batch hot path, {args.nodes} nodes, {len(raw):,} events, median of "
          f"{args.rounds} alternating runs; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    base, with_skew = statistics.median(runs[False]), statistics.median(runs[True])
    print(f"{'no estimator':>14} {len(raw) / base:>12,.0f} events/CPU-s")
    print(f"{'estimator':>14} {len(raw) / with_skew:>12,.0f} events/CPU-s  ({base / with_skew:.3f} of the baseline)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
