"""Detector throughput and state memory on a 1,024-GPU fleet (a benchmark, not a test).

Run: `python -m benchmarks.bench_detectors [--minutes M] [--nodes N]`.

It simulates a fleet with the project's simulator (128 nodes x 8 GPUs,
tp=8, pp=4, dp=32 by default; a few faults so detectors do real work),
then measures, on one core (the process pins itself to one CPU when the
OS allows it):

* detector throughput: records already decoded, fed one by one through
  `DetectionPipeline.from_settings(DetectorSettings())` (the default
  detectors plus the correlator) — the detectors' own cost;
* backtest throughput: the same recording read from JSON Lines, decoded
  and detected by `lab.backtest.runner.run_backtest` — what
  `trainguard backtest` achieves end to end;
* decode-only baseline: the same file read and decoded, nothing detected
  (`streams.recording.read_recording`), the natural baseline both rates
  above are quoted against;
* detector state memory per 1,000 GPUs: the pickled size of the pipeline
  (what the worker checkpoints) and the traced Python heap it holds.

Rates are events per second of *CPU time* of this single-threaded process
(`time.process_time`), i.e. per core, so they hold better on a shared machine
where wall-clock rates would mostly measure the neighbours; the detector
figure is the best of three fresh runs.

It prints the figures and asserts nothing.

**Scaling** (`--scale 64,512,4096,12500`): the cost per event of the
worker's pure part (`BatchLoop._process` on aiokafka `ConsumerRecord`s, the
task built as `trainguard worker` builds it: decode, event clock and heap,
each host's clock-skew estimate, the default detectors, the correlator; no
broker; the worker's collector policy), at several fleet sizes with the same
number of events and the same mix: per node and second one 8-GPU sample, one
sample of 8 RDMA ports, a step per rank every 10 s and a heartbeat per rank
every 5 s (4.4 events per node per second), in jobs of at most `--job-nodes`
nodes (4,096 = 32,768 ranks, the most a job's per-rank maps keep,
`detectors.common.MAX_RANKS`; 12,500 nodes = 100,000 GPUs are four jobs of
3,125 nodes). Each size runs in a fresh process: `--warm-s` seconds of event
time first (every rank steps once, every node and port is known), not timed,
then `--events` events timed (CPU time of `_process` only, the encoding of
the input is not counted), printed with the ratio to 512 nodes. Memory per
1,000 GPUs is the process's resident set (RSS) after the run minus before
the task was built, after a full collection: what the state costs the
machine, allocator overhead included. The snapshot columns are the CPU
time and size of the task's snapshot as the worker writes it at each
commit (`streams.worker.snapshot.dump`, best of 3): that cost grows with
the state, and the worker spaces its commits to keep it near 5% of its
time (`batch_loop.SNAPSHOT_BUDGET`). `--profile` prints the timed part's
top functions (cProfile, which inflates the figures: compare profiles with
each other only). `--snapshot-parts COMMIT_S` then prints each size's
snapshot by part (`benchmarks.snapshot_parts`: each detector's maps, the
clocks, the waiting records, the hosts' clock estimates; pickle time and
size) and the share of each part's bytes in entries that COMMIT_S more
seconds of the mix changed: what a changed-entries-only (incremental)
snapshot would write at that commit interval.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import multiprocessing
import os
import pstats
import tempfile
import time
import tracemalloc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.bench_gc import FETCH, TOPICS, GcClock, Raw, as_fetch, hot_loop
from benchmarks.fleet_mix import events_per_node_s, fleet_second
from benchmarks.interpreter import describe
from benchmarks.snapshot_parts import Part, changed, digests, measure, parts
from trainguard.detectors import state_tree
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.detectors.settings import DetectorSettings
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import Record
from trainguard.schemas.topics import key_for
from trainguard.streams.worker import heap, snapshot
from trainguard.streams.worker.batch_loop import BatchLoop


def scenario(nodes: int, minutes: float) -> dict[str, Any]:
    """A fleet scenario with one straggler: detectors stay busy, mostly quiet."""
    duration = minutes * 60.0
    return {
        "name": "bench-1024",
        "seed": 7,
        "duration_s": duration,
        "job": {"name": "bench", "nodes": nodes, "gpus_per_node": 8, "tp": 8, "pp": 4, "step_time_s": 2.0,
                "checkpoint_every_s": 600, "checkpoint_pause_s": 30},
        "faults": [
            {"kind": "slowdown", "at_s": duration * 0.3, "magnitude": 0.2, "duration_s": duration * 0.3},
        ],
    }


def simulate(nodes: int, minutes: float) -> list[Record]:
    """The fleet's records, in event-time order."""
    from trainguard.lab.telemetry_sim import run_scenario
    from trainguard.lab.telemetry_sim.scenario import parse_scenario

    events, _ = run_scenario(parse_scenario(scenario(nodes, minutes), "bench"))
    return list(events)


def detector_throughput(records: list[Record], repeats: int = 3) -> tuple[float, DetectionPipeline, int]:
    """Events/s through the default pipeline, records pre-decoded (best of `repeats` fresh runs)."""
    best = 0.0
    for _ in range(repeats):
        pipeline = DetectionPipeline.from_settings(DetectorSettings())
        incidents = 0
        gc.collect()
        start = time.process_time()
        for record in records:
            incidents += len(pipeline.process(record)[1])
        best = max(best, len(records) / (time.process_time() - start))
    return best, pipeline, incidents


def backtest_throughput(records: list[Record]) -> tuple[float, float]:
    """Events/s of the full backtest (read + decode + detect) over a JSON Lines file, and of
    reading and decoding that file alone (the baseline), each the best of three."""
    from trainguard.lab.backtest.runner import run_backtest
    from trainguard.streams.recording import read_recording, write_recording

    full = decode = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fleet.jsonl"
        write_recording(path, iter(records))
        for _ in range(3):
            start = time.process_time()
            count = sum(1 for _ in read_recording(path))
            decode = max(decode, count / (time.process_time() - start))
            pipeline = DetectionPipeline.from_settings(DetectorSettings())
            start = time.process_time()
            result = run_backtest(path, pipeline)
            full = max(full, result.events / (time.process_time() - start))
    return full, decode


def state_memory(records: list[Record]) -> tuple[int, int, int]:
    """(pickled bytes, traced heap bytes, summed state_size) of a pipeline after the stream."""
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    pipeline = DetectionPipeline.from_settings(DetectorSettings())
    for record in records:
        pipeline.process(record)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    heap = sum(s.size_diff for s in after.compare_to(before, "filename"))
    return len(state_tree.dumps(pipeline)), heap, sum(d.state_size() for d in pipeline.detectors)


@dataclass(frozen=True)
class ScaleRun:
    """One fleet size's figures."""

    nodes: int
    events: int
    cpu_s: float
    gc_s: float  # of which the garbage collector
    rss_bytes: int
    entries: int
    snapshot_s: float = 0.0  # CPU to write the task's snapshot once (what every commit pays), best of 3
    snapshot_bytes: int = 0
    profile: str = ""
    parts: tuple[Part, ...] = ()  # --snapshot-parts: the snapshot by part, and what one interval changed

    @property
    def us_per_event(self) -> float:
        return self.cpu_s / self.events * 1e6

    @property
    def gpus(self) -> int:
        return self.nodes * 8


def _rss_bytes() -> int:
    """This process's resident set (Linux /proc), in bytes."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _mix(nodes: int, job_nodes: int, start: int = 0) -> Iterator[list[Raw]]:
    """The scaling mix, encoded, one fetch of `FETCH` messages at a time, from second `start` on (endless)."""
    codec, offsets, batch = Codec(), dict[str, int](), []
    second = start
    while True:
        t = 1_000_000.0 + second
        for record in fleet_second(nodes, t, second, rdma=True, job_nodes=job_nodes):
            topic = TOPICS.for_record(record)
            offset = offsets[topic] = offsets.get(topic, -1) + 1
            batch.append((topic, offset, key_for(record), codec.encode(record), int(t * 1000)))
            if len(batch) == FETCH:
                yield batch
                batch = []
        second += 1


def scale_run(nodes: int, events: int, warm_s: int, job_nodes: int, profile: bool = False,
              commit_s: float = 0.0) -> ScaleRun:
    """Warm a fresh task up on `warm_s` seconds of the mix, then time `events` events through the hot path.

    With `commit_s`, the snapshot is then taken apart (`snapshot_parts`) before and after `commit_s`
    seconds more of the mix: what an incremental snapshot at that commit interval would write."""
    old = heap.settle_after_startup()  # the worker's collector policy (`trainguard worker` sets it before its loop)
    collector = GcClock()
    gc.callbacks.append(collector)
    try:
        rss = _rss_bytes()
        loop = hot_loop(like_worker=True)
        fetches = _mix(nodes, job_nodes)
        warm, done = int(warm_s * nodes * events_per_node_s(rdma=True)), 0
        while done < warm:
            batch = next(fetches)
            loop._process(as_fetch(batch))  # noqa: SLF001 - the hot path itself, without a broker
            done += len(batch)
        collector.spent = 0.0
        profiler = cProfile.Profile() if profile else None
        done, cpu = _timed(loop, fetches, events, profiler)
        gc_s = collector.spent
        gc.collect()
        resident = _rss_bytes() - rss  # before the parts' digests, which take memory of their own
        entries = sum(d.state_size() for d in loop.task(0).processor.pipeline.detectors)
        snapshot_s, snapshot_bytes = _snapshot_cost(loop)
        split = _snapshot_parts(loop, fetches, int(commit_s * nodes * events_per_node_s(rdma=True))) if commit_s else ()
        del fetches
        text = ""
        if profiler is not None:
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(18)
            text = out.getvalue()
        return ScaleRun(nodes, done, cpu, gc_s, resident, entries, snapshot_s, snapshot_bytes, text, split)
    finally:
        gc.callbacks.remove(collector)
        heap.restore(old)


def _snapshot_cost(loop: BatchLoop) -> tuple[float, int]:
    """(CPU seconds, bytes) of the task's snapshot as the worker writes it at a commit, best of 3."""
    task = loop.task(0)
    best, blob = float("inf"), b""
    for _ in range(3):
        started = time.process_time()
        blob = snapshot.dump(snapshot.Snapshot(task.processor.pipeline, dict(task.clock.parts),
                                               task.processor.buffer.entries(), skew=task.processor.skew))
        best = min(best, time.process_time() - started)
    return best, len(blob)


def _snapshot_parts(loop: BatchLoop, fetches: Iterator[list[Raw]], events: int) -> tuple[Part, ...]:
    """The task's snapshot by part, then the share of each that `events` more events of the mix changed."""
    before = {name: measure(name, value) for name, value in parts(loop.task(0)).items()}
    done = 0
    while done < events:
        batch = next(fetches)
        loop._process(as_fetch(batch))  # noqa: SLF001
        done += len(batch)
    after = parts(loop.task(0))
    out = []
    for name, (part, old) in before.items():
        new = digests(after[name]) if name in after else {}
        leaf_bytes = sum(size for _, size in new.values())  # the share is of the part as the next commit finds it
        out.append(Part(part.name, part.pickle_s, part.size, len(new), leaf_bytes, changed(old, new)))
    return tuple(out)


def print_parts(run: ScaleRun) -> None:
    """One size's snapshot by part, costliest first, and the share an incremental snapshot would write."""
    total_s = sum(p.pickle_s for p in run.parts) or 1.0
    leaf_bytes = sum(p.leaf_bytes for p in run.parts) or 1
    print(f"  {run.nodes:,} nodes: the snapshot by part (pickle only, best of 3; changed: share of the part's "
          f"bytes in entries new or different after one commit interval)")
    print(f"    {'part':<34} {'ms':>7} {'share':>6} {'KiB':>8} {'entries':>9} {'changed':>8}")
    for p in sorted(run.parts, key=lambda p: -p.pickle_s)[:14]:
        print(f"    {p.name:<34} {p.pickle_s * 1000:>7.1f} {p.pickle_s / total_s:>6.1%} {p.size / 1024:>8.0f} "
              f"{p.leaves:>9,} {p.changed_share:>8.1%}")
    written = sum(p.changed_bytes for p in run.parts) / leaf_bytes
    # An incremental snapshot still pickles what changed: weigh each part's cost by its changed share.
    cost = sum(p.pickle_s * p.changed_share for p in run.parts) / total_s
    print(f"    an incremental snapshot would write {written:.1%} of the bytes, for about {cost:.0%} of the "
          f"pickling (before finding what changed, which is not free)", flush=True)


def _timed(loop: BatchLoop, fetches: Iterator[list[Raw]], events: int,
           profiler: cProfile.Profile | None) -> tuple[int, float]:
    """(events, CPU seconds) of processing fetches until `events` were handled; only `_process` is timed."""
    cpu, done = 0.0, 0
    while done < events:
        fetch = as_fetch(next(fetches))
        if profiler is not None:
            profiler.enable()
        started = time.process_time()
        loop._process(fetch)  # noqa: SLF001
        cpu += time.process_time() - started
        if profiler is not None:
            profiler.disable()
        done += sum(map(len, fetch.values()))
    return done, cpu


def scale(sizes: Sequence[int], events: int, warm_s: int, job_nodes: int, profile: bool,
          rounds: int = 1, commit_s: float = 0.0) -> list[ScaleRun]:
    """`scale_run` per size and round, each in a fresh process (no heap, cache or allocator state carried
    over); with several rounds, the sizes alternate and each size's median run is printed last."""
    ctx = multiprocessing.get_context("spawn")
    runs: list[ScaleRun] = []
    with ctx.Pool(1, maxtasksperchild=1) as pool:
        for _ in range(rounds):
            done: list[ScaleRun] = []
            for nodes in sizes:
                done.append(pool.apply(scale_run, (nodes, events, warm_s, job_nodes, profile, commit_s)))
                print_scale_row(done[-1], done)
                if done[-1].parts:
                    print_parts(done[-1])
            runs.extend(done)
    if rounds > 1:
        medians = [_median_run([r for r in runs if r.nodes == nodes]) for nodes in sizes]
        print(f"median of {rounds} rounds:")
        for run in medians:
            print_scale_row(run, medians)
    return runs


def _median_run(runs: Sequence[ScaleRun]) -> ScaleRun:
    """The run with the median cost per event."""
    return sorted(runs, key=lambda r: r.us_per_event)[len(runs) // 2]


def print_scale_row(run: ScaleRun, runs: Sequence[ScaleRun]) -> None:
    """One size's row; the ratio to 512 nodes once that size has run."""
    ref = next((r for r in runs if r.nodes == 512), None)
    ratio = f"{run.us_per_event / ref.us_per_event:.2f}" if ref is not None else "-"
    print(f"{run.nodes:>7,} {run.gpus:>8,} {run.events:>8,} {run.us_per_event:>9.2f} {ratio:>7} "
          f"{run.gc_s / run.cpu_s:>5.1%} "
          f"{run.rss_bytes / 2**20 * 1000 / run.gpus:>12.2f} {run.entries:>10,} "
          f"{run.snapshot_s * 1000:>8.0f} {run.snapshot_bytes / 2**20:>8.2f}  "
          f"(load {os.getloadavg()[0]:.1f})", flush=True)
    if run.profile:
        print(run.profile, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_detectors", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=128, help="nodes of 8 GPUs (default 128 = 1,024 GPUs)")
    parser.add_argument("--minutes", type=float, default=10.0, help="simulated minutes (default 10)")
    parser.add_argument("--scale", help="comma-separated fleet sizes in nodes: run the scaling benchmark instead")
    parser.add_argument("--events", type=int, default=200_000,
                        help="timed events per size (--scale; default %(default)s)")
    parser.add_argument("--warm-s", type=int, default=10,
                        help="untimed seconds of event time first (--scale; default %(default)s)")
    parser.add_argument("--job-nodes", type=int, default=4096,
                        help="largest job in nodes (--scale; default %(default)s)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="alternating rounds over the sizes, then each size's median (--scale; default 1)")
    parser.add_argument("--profile", action="store_true", help="print each size's cProfile top functions (--scale)")
    parser.add_argument("--snapshot-parts", type=float, metavar="COMMIT_S", default=0.0,
                        help="also print each size's snapshot by part and the share of it that COMMIT_S seconds "
                             "of event time change: what an incremental snapshot would write (--scale)")
    args = parser.parse_args(argv)
    if args.scale is not None:
        try:
            sizes = [int(n) for n in args.scale.split(",")]
        except ValueError:
            parser.error(f"--scale: expected comma-separated node counts, got {args.scale!r}")
        if min(sizes, default=0) < 1 or min(args.events, args.job_nodes, args.rounds) < 1 or args.warm_s < 0:
            parser.error("--scale sizes, --events, --job-nodes and --rounds must be positive, --warm-s not negative")
        if args.snapshot_parts < 0:
            parser.error("--snapshot-parts: the commit interval in seconds must not be negative")
        print(f"interpreter: {describe()}")
        print(f"the worker's hot path per event (BatchLoop._process, default detectors, no broker); "
              f"{args.events:,} timed events per size after {args.warm_s} s of event time untimed; jobs of at most "
              f"{args.job_nodes:,} nodes; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"{'nodes':>7} {'GPUs':>8} {'events':>8} {'us/event':>9} {'vs 512':>7} {'gc':>5} {'MiB/1k GPUs':>12} "
              f"{'entries':>10} {'snap ms':>8} {'snap MiB':>8}  (RSS delta; one task snapshot, as each commit "
              f"writes it)")
        scale(sizes, args.events, args.warm_s, args.job_nodes, args.profile, args.rounds, args.snapshot_parts)
        return 0
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    gpus = args.nodes * 8
    records = simulate(args.nodes, args.minutes)
    print(f"interpreter: {describe()}")
    print(f"fleet: {args.nodes} nodes x 8 GPUs = {gpus} GPUs, {args.minutes:g} simulated minutes, "
          f"{len(records):,} events")
    rate, pipeline, incidents = detector_throughput(records)
    print(f"detectors (default set + correlator, pre-decoded): {rate:,.0f} events per CPU-second, "
          f"{incidents} incidents")
    full, decode = backtest_throughput(records)
    print(f"backtest end to end (read + decode + detect):      {full:,.0f} events per CPU-second")
    print(f"decode-only baseline (read + decode):              {decode:,.0f} events per CPU-second; "
          f"ratios: backtest {full / decode:.2f}, detectors alone {rate / decode:.2f} "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    pickled, heap, entries = state_memory(records)
    per_k = 1000 / gpus
    print(f"detector state: {pickled * per_k / 1024:,.0f} KiB pickled and {heap * per_k / 1024:,.0f} KiB heap "
          f"per 1,000 GPUs ({entries:,} keyed entries for {gpus} GPUs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
