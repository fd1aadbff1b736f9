"""The live pipeline: one real worker process, the real local broker, the default detectors.

1. **The floors** (`benchmarks.pipeline_floors`). Read the same backlog,
   from the same broker, three ways that do nothing but what every consumer
   must: decode only (the values already in memory, our codec), aiokafka's
   consumer + decode (the client the worker runs), and confluent-kafka's
   (librdkafka) + decode, when the `bench` extra is installed. Each is events
   per CPU-second of this process (librdkafka's threads included).
2. **Throughput.** Pre-load the input topics with N realistic events of a
   fleet (`benchmarks.fleet_mix`: an 8-GPU sample per node per second, a step
   per rank every `step_s`, a heartbeat per rank every 5 s), then start one worker and time
   how fast it drains them: progress is the worker group's committed input
   offsets, read from the broker with the admin client, from the first
   commit to the one that covers the backlog (so Faust's start-up is not
   counted, and the worker pays no /metrics scrapes, which at a scrape per
   0.1 s under-reported it by 7-25% when state sizes were walked per scrape).
   It is printed next to the floors, as a ratio of each, with the load.
   With `--rounds N` the floors and a drain alternate N times, each round on
   a fresh backlog of the same shape, and the median of the rounds' ratios is
   printed with their range: on a shared machine the floors move as much as
   the worker between runs, so a ratio is judged within its round. The
   throughput lines after it (and the latency run's rate) are then the
   median round's drain.
   With `--compare-clients`, each round also reads its backlog with
   aiokafka and with confluent-kafka, every fetch through the worker's hot
   path without transactions (`benchmarks.client_compare`): what moving the
   worker's Kafka edge to librdkafka would buy, measured behind the worker's
   own work rather than added up from the floors.
3. **Latency.** Start a fresh worker, produce the same mix at 50% of the
   measured rate, and every 0.25 s inject a NaN step (for a job of its own)
   whose `ts` is its send time; the event-to-anomaly latency is when the
   anomaly arrives on the anomalies topic minus that `ts`.

Targets: >= 50k events/s per worker, p99 <= 1 s. Prints figures only.
Everything (producer, worker, broker) shares this machine's cores, so the
numbers are a floor for a dedicated worker host.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from benchmarks.bench_codec import sample
from benchmarks.client_compare import Processed, compare_clients, print_client_rounds, print_clients
from benchmarks.fleet_mix import Backlog, events_per_node_s, fleet_second, load_backlog, producer, send_all
from benchmarks.interpreter import describe
from benchmarks.pipeline_floors import measure_floors, print_side_by_side
from benchmarks.process_usage import cpu_seconds, peak_rss_mib
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import NodeGpuSample, Record, TrainingStep, XidEvent
from trainguard.schemas.topics import Topics
from trainguard.settings import load_settings
from trainguard.streams.admin import BrokerUnreachable, ensure_topics, require_broker


@contextmanager
def worker(servers: str, prefix: str, workdir: Path, *, exactly_once: bool = True,
           max_waiting: int | None = None) -> Iterator[tuple[int, int]]:
    """A real `trainguard worker` process; yields its metrics port and pid. Its log is `<workdir>/<prefix>log`."""
    port = 19_000 + uuid.uuid4().int % 2000
    section: dict[str, object] = {"app_id": f"bench-{prefix}", "state_dir": str(workdir / prefix),
                                  "exactly_once": exactly_once}
    if max_waiting is not None:
        section["max_waiting_records"] = max_waiting
    config = {"broker": {"bootstrap": servers}, "topics": {"prefix": prefix}, "worker": section,
              "metrics": {"port": port}}
    path = workdir / f"{prefix}yaml"
    path.write_text(yaml.safe_dump(config))
    log = (workdir / f"{prefix}log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "trainguard.cli", "-c", str(path), "worker", "--loglevel", "info"],
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        yield port, proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


class CommittedProgress:
    """Input records the worker's consumer group has committed, read with the admin client (OffsetFetch).

    Reading the group's offsets neither joins the group nor costs the worker
    anything, unlike scraping its /metrics.
    """

    def __init__(self, servers: str, group: str, topics: Sequence[str]) -> None:
        self._admin = KafkaAdminClient(bootstrap_servers=servers)
        self._group = group
        reader = KafkaConsumer(bootstrap_servers=servers)
        try:
            tps = [TopicPartition(t, p) for t in topics for p in reader.partitions_for_topic(t) or ()]
            self.total = sum(reader.end_offsets(tps).values())
        finally:
            reader.close()
        self._topics = set(topics)

    def committed(self) -> int:
        """Committed offsets summed over the input partitions (0 before the first commit)."""
        offsets = self._admin.list_group_offsets({self._group: None}).get(self._group, {})
        return sum(max(0, meta.offset) for tp, meta in offsets.items() if tp.topic in self._topics)

    def close(self) -> None:
        self._admin.close()


def ready(port: int) -> bool:
    """Whether the worker answers /readyz with 200 (assigned, state restored); no metrics scraped."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


@dataclass(frozen=True)
class Drain:
    """One worker's drain of a backlog."""

    per_s: float  # events per wall second
    per_cpu_s: float  # events per CPU-second of the worker process
    peak_rss_mib: float  # the worker's peak resident memory (VmHWM)
    largest_snapshot: int  # bytes of its largest task snapshot (from its log at stop; 0 when unknown)
    snapshot_cpu_s: float = 0.0  # CPU seconds all its snapshots took (from its log at stop; 0 when unknown)


def measure_throughput(servers: str, workdir: Path, backlog: Backlog,
                       *, exactly_once: bool = True, max_waiting: int | None = None) -> Drain:
    """Drain a pre-loaded backlog with one worker: events per wall and per CPU second, memory, snapshot size.

    On a shared machine the worker does not get a whole core; events per CPU
    second is what it would sustain on a dedicated one. `max_waiting` sets
    `worker.max_waiting_records` (None: its default).
    """
    # the batch loop's group (streams/worker/factory.py)
    progress = CommittedProgress(servers, f"bench-{backlog.prefix}.detect", backlog.names)
    rates: tuple[float, float] | None = None
    try:
        with worker(servers, backlog.prefix, workdir, exactly_once=exactly_once,
                    max_waiting=max_waiting) as (_port, pid):
            rates = _drained(progress, pid)
            rss = peak_rss_mib(pid)
    finally:
        progress.close()
    log = (workdir / f"{backlog.prefix}log").read_text(errors="replace")
    largest = re.search(r"the largest task snapshot (\d+) bytes", log)
    snapshots = re.search(r"snapshots \(([\d.]+) s of CPU\)", log)
    return Drain(rates[0], rates[1], rss, int(largest.group(1)) if largest else 0,
                 float(snapshots.group(1)) if snapshots else 0.0)


def _drained(progress: CommittedProgress, pid: int) -> tuple[float, float]:
    """(events per wall second, per CPU second) from the first commit to the one covering the backlog."""
    first: tuple[float, float, int] | None = None
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        done = progress.committed()
        now, cpu = time.perf_counter(), cpu_seconds(pid)
        if done and first is None:
            first = (now, cpu, done)
        if done >= progress.total and first is not None:
            if first[2] >= progress.total:
                raise RuntimeError("the backlog drained within one commit: raise --events")
            return (done - first[2]) / (now - first[0]), (done - first[2]) / max(1e-9, cpu - first[1])
        time.sleep(0.1)
    raise RuntimeError("the worker did not drain the backlog within 10 minutes")



UNBOUNDED = 10**9  # worker.max_waiting_records that never presses


def print_snapshots(drain: Drain, events: int) -> None:
    """What the drain's state snapshots cost: CPU in all, per event of the backlog, share of the worker's CPU."""
    if not drain.snapshot_cpu_s:
        print("  state snapshots: no figure (at-least-once writes none, or the worker's stop line was not found)")
        return
    per_event = drain.snapshot_cpu_s / max(events, 1)
    print(f"  of which state snapshots: {drain.snapshot_cpu_s:.2f} CPU-s in all, {per_event * 1e6:.2f} us per event "
          f"(about {per_event * drain.per_cpu_s:.0%} of the worker's CPU; largest task snapshot "
          f"{drain.largest_snapshot / 1e6:.1f} MB)")


def print_backpressure(bounded: Drain, unbounded: Drain) -> None:
    """The drain with the default bound on waiting records against one without."""
    print("backpressure (worker.max_waiting_records), one backlog shape drained twice:")
    for label, d in (("default bound", bounded), ("no bound (10^9)", unbounded)):
        print(f"  {label:16s} {d.per_cpu_s:>9,.0f} events/CPU-s   peak RSS {d.peak_rss_mib:>7,.0f} MiB   "
              f"largest task snapshot {d.largest_snapshot / 1e6:>6.1f} MB")
    print(f"  ratio bounded/unbounded: {bounded.per_cpu_s / max(unbounded.per_cpu_s, 1.0):.2f}x events/CPU-s")


def measure_latency(servers: str, workdir: Path, rate: float, seconds: float) -> dict[str, list[float]]:
    """Event-to-anomaly latencies (s) by kind of faults injected into a steady `rate` events/s.

    Alternately an XID 79 on a node of its own (hw_fault) and a NaN step of a job of its own (nan).
    """
    prefix = f"lat{uuid.uuid4().hex[:6]}."
    topics = Topics(prefix)
    ensure_topics(servers, topics.all(), partitions=load_settings().topics.partitions, replication=1)
    sent_at: dict[str, float] = {}
    latencies: dict[str, list[float]] = {"hw_fault": [], "nan": []}
    stop = threading.Event()

    def collect() -> None:  # its own thread, so arrival times are not held up by producing
        codec = Codec()
        consumer = KafkaConsumer(topics.name("anomalies"), bootstrap_servers=servers, auto_offset_reset="earliest")
        while not stop.is_set():
            for messages in consumer.poll(timeout_ms=50).values():
                now = time.time()
                for msg in messages:
                    anomaly = codec.decode(msg.value)
                    key = anomaly.job if anomaly.kind == "nan" else (anomaly.nodes or [""])[0]
                    sent = sent_at.pop(key, None) if anomaly.kind in latencies else None
                    if sent is not None:  # from the fault's send time (its `ts`) to its anomaly's arrival
                        latencies[anomaly.kind].append(now - sent)
        consumer.close()

    with worker(servers, prefix, workdir) as (port, _pid):
        while not ready(port):
            time.sleep(0.2)
        time.sleep(5)  # let the worker join its group and start fetching
        listener = threading.Thread(target=collect, daemon=True)
        listener.start()
        sent, injected = asyncio.run(_steady(servers, topics, rate, seconds, sent_at))
        time.sleep(3)
        stop.set()
        listener.join(timeout=10)
    print(f"  produced {sent / seconds:,.0f} events/s (asked {rate:,.0f}) for {seconds:.0f} s; "
          f"{injected} faults injected, {sum(map(len, latencies.values()))} anomalies received")
    return latencies


async def _steady(servers: str, topics: Topics, rate: float, seconds: float,
                  sent_at: dict[str, float]) -> tuple[int, int]:
    """Produce the fleet mix at `rate` events/s in 100 ms slices, a fault every 0.25 s; (events, faults)."""
    codec, kafka = Codec(), producer(servers)
    await kafka.start()
    nodes = max(1, int(rate / events_per_node_s()))  # a fleet that emits `rate` events/s
    start, sent, second, next_nan, injected = time.time(), 0, 0, time.time(), 0
    backlog: list[Record] = []
    slice_size = 1
    try:
        while time.time() - start < seconds:
            tick = time.time()
            if not backlog:
                backlog = list(fleet_second(nodes, tick, second))
                slice_size = len(backlog) // 10 + 1
                second += 1
            chunk, backlog = backlog[:slice_size], backlog[slice_size:]
            sent += await send_all(kafka, codec, topics, chunk, flush=False)
            while time.time() >= next_nan:
                fault = _fault(injected)
                sent_at[fault.job if isinstance(fault, TrainingStep) else fault.node] = fault.ts
                await send_all(kafka, codec, topics, [fault], flush=False)
                injected, next_nan = injected + 1, next_nan + 0.25
            await asyncio.sleep(max(0.0, tick + 0.1 - time.time()))
    finally:
        await kafka.stop()
    return sent, injected


def _fault(i: int) -> TrainingStep | NodeGpuSample:
    """The i-th injected fault, stamped with the send time: an XID 79 or a NaN loss."""
    now = time.time()
    if i % 2:
        return TrainingStep(ts=now, job=f"nan-{i}", rank=0, node="node-0000", step=1, loss=float("nan"))
    return NodeGpuSample(ts=now, node=f"xid-{i}", job="bench", gpus=sample().gpus,
                         xids=[XidEvent(gpu=0, code=79, ts=now, message="GPU has fallen off the bus")])


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def round_ratios(rounds: Sequence[tuple[dict[str, float | None], float]]) -> dict[str, list[float]]:
    """Per floor, the worker's ratio to it in each round: a worker and the floors it is judged against are
    measured back to back on one backlog, so each ratio is taken within its round, never across rounds."""
    out: dict[str, list[float]] = {}
    for floors, worker_rate in rounds:
        for name, rate in floors.items():
            if rate:
                out.setdefault(name, []).append(worker_rate / rate)
    return out


def median_drain(drains: Sequence[Drain]) -> Drain:
    """The drain whose events per CPU-second is the median (the lower of the two middle ones for an even count):
    one real drain, so its wall-clock rate, snapshots and memory belong together."""
    return sorted(drains, key=lambda d: d.per_cpu_s)[(len(drains) - 1) // 2]


def print_rounds(rounds: Sequence[tuple[dict[str, float | None], float]]) -> None:
    """The median of the rounds' ratios to each floor, with their range, and the worker's own median."""
    workers = [rate for _, rate in rounds]
    print(f"over {len(rounds)} rounds (each its own backlog of the same shape; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores):")
    print(f"  worker, exactly-once: median {statistics.median(workers):,.0f} events/CPU-s "
          f"(range {min(workers):,.0f} - {max(workers):,.0f})")
    for name, ratios in round_ratios(rounds).items():
        print(f"  the worker against {name}: median {statistics.median(ratios):.2f}x "
              f"(range {min(ratios):.2f} - {max(ratios):.2f}x, {len(ratios)} rounds)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_pipeline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=300_000, help="backlog size for the throughput run")
    parser.add_argument("--nodes", type=int, default=512, help="fleet size the events describe")
    parser.add_argument("--rdma", action="store_true",
                        help="add each node's 8-port RDMA sample per second (the mix docs/sizing.md plans with)")
    parser.add_argument("--job-nodes", type=int, default=0,
                        help="split the fleet into jobs of at most this many nodes (0: one job spans the fleet)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="alternate the floors and a drain this many times, each round on a fresh backlog, and "
                             "print the median of the rounds' ratios (default 1)")
    parser.add_argument("--latency-s", type=float, default=30.0, help="length of the latency run (0: skip it)")
    parser.add_argument("--compare-exactly-once", action="store_true",
                        help="also drain the same backlog at-least-once (no transactions, no snapshots) "
                             "and print the ratio")
    parser.add_argument("--compare-backpressure", action="store_true",
                        help="also drain the same backlog with worker.max_waiting_records at 10^9 (no bound) and "
                             "print both drains' events/CPU-s, peak RSS and largest snapshot")
    parser.add_argument("--compare-clients", action="store_true",
                        help="also read the backlog with aiokafka and with confluent-kafka, each fetch through the "
                             "worker's hot path (no transactions), and print both rates and their ratio")
    parser.add_argument("--latency-rate", type=float, help="skip the throughput run; measure latency at this events/s")
    args = parser.parse_args(argv)
    if args.events < 1 or args.nodes < 1 or args.job_nodes < 0 or args.rounds < 1:
        parser.error("--events, --nodes and --rounds must be positive, --job-nodes not negative")
    settings = load_settings()
    try:
        require_broker(settings)
    except BrokerUnreachable as exc:
        print(f"bench_pipeline: {exc} (start it with `trainguard broker start`)", file=sys.stderr)
        return 2
    servers = settings.broker.servers
    print(f"interpreter (the floors' and the worker's): {describe()}")
    with tempfile.TemporaryDirectory(prefix="tg-bench-") as tmp:
        if args.latency_rate:
            lat = measure_latency(servers, Path(tmp), args.latency_rate, args.latency_s)
            _print_latency(lat)
            return 0
        rounds: list[tuple[dict[str, float | None], float]] = []
        drains: list[Drain] = []
        clients: list[list[Processed]] = []
        for number in range(args.rounds):
            if args.rounds > 1:
                print(f"round {number + 1} of {args.rounds}:")
            backlog = load_backlog(servers, args.nodes, args.events, rdma=args.rdma, job_nodes=args.job_nodes)
            floors = measure_floors(servers, backlog)
            drains.append(measure_throughput(servers, Path(tmp), backlog))
            print_side_by_side(backlog, args.nodes, floors, drains[-1].per_cpu_s)
            rounds.append((floors, drains[-1].per_cpu_s))
            if args.compare_clients:
                clients.append(compare_clients(servers, backlog))
                print_clients(clients[-1], drains[-1].per_cpu_s)
        drain = median_drain(drains)  # what follows (throughput, snapshots, the latency run's rate) is its figures
        if args.rounds > 1:
            print_rounds(rounds)
            if clients:
                print_client_rounds(clients)
            print("the lines below are the median round's drain:")
        rate, per_cpu_s = drain.per_s, drain.per_cpu_s
        if args.compare_exactly_once:
            again = load_backlog(servers, args.nodes, args.events, rdma=args.rdma, job_nodes=args.job_nodes)
            per_cpu_0 = measure_throughput(servers, Path(tmp), again, exactly_once=False).per_cpu_s
            print(f"exactly-once (transactions + snapshots): {per_cpu_s:,.0f} events/CPU-s; at-least-once baseline "
                  f"{per_cpu_0:,.0f} events/CPU-s; ratio {per_cpu_s / max(per_cpu_0, 1.0):.2f}")
        if args.compare_backpressure:
            again = load_backlog(servers, args.nodes, args.events, rdma=args.rdma, job_nodes=args.job_nodes)
            unbounded = measure_throughput(servers, Path(tmp), again, max_waiting=UNBOUNDED)
            print_backpressure(drain, unbounded)
        per_node = events_per_node_s(rdma=args.rdma)
        print(f"throughput: {rate:,.0f} events/s per worker, wall clock on this shared machine "
              f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
        print(f"  {per_cpu_s:,.0f} events per worker CPU-second (a dedicated core; target >= 50,000/s)")
        print_snapshots(drain, backlog.events)
        rate = max(rate, 1.0)
        for label, r in (("wall clock", rate), ("dedicated core", per_cpu_s)):
            print(f"  fleet at 1 Hz ({label}): {r * 8:,.0f} GPUs counting GPU samples only (1 event per 8-GPU node "
                  f"per second); {r / per_node * 8:,.0f} GPUs with the full mix ({per_node:.1f} events/node/s)")
        if args.latency_s <= 0:
            return 0
        lat = measure_latency(servers, Path(tmp), rate / 2, args.latency_s)
    _print_latency(lat)
    return 0


def _print_latency(latencies: dict[str, list[float]]) -> None:
    print(f"event-to-anomaly latency (target p99 <= 1,000 ms; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores):")
    for kind, lat in latencies.items():
        note = " (includes the NaN detector's 1 s event-time settle window)" if kind == "nan" else ""
        print(f"  {kind:9s} n={len(lat):4d}  p50 {percentile(lat, 0.5) * 1000:,.0f} ms, "
              f"p99 {percentile(lat, 0.99) * 1000:,.0f} ms{note}")


if __name__ == "__main__":
    raise SystemExit(main())
