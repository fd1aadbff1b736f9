"""Scale-out: the same backlog drained by 1, 2, 4 and 8 workers of one group, each on a core of its own,
and a takeover after SIGKILL.

The backlog is a GPU sample per node per second and a step per rank every
10 s, for a fleet split into many jobs (a job's evidence shares a partition,
so one job cannot be split; many jobs can), `--events-per-worker` events per worker so every run drains for about
as long. Each run gets fresh topics with `--partitions` partitions.

A core each: the machine's cores are split into shared ones (the broker when
`--broker-pid` names it, this process and its producer) and one core per
worker, every thread of each worker pinned to it (`benchmarks/cores.py`). A
count the machine has no cores for is not measured, and the output says so;
`--oversubscribe` measures it anyway on shared cores, labelled as such (its
wall-clock rate cannot scale; its events per CPU-second still mean something).

Progress is the group's committed input offsets, read from the broker: it
costs the workers nothing (no /metrics scrapes) and counts a record once even
when a rebalance has it processed twice. The clock starts at the first commit
after every worker holds tasks (the group is whole) and stops when every
input record is committed. Reported per run: events per wall second, the
ratio to one worker and the efficiency (ratio / workers), and events per
worker CPU-second; with `--json`, all of it as a document.

Takeover: two workers share a backlog; one is killed with SIGKILL; the time
until the survivor reports having restored the killed one's tasks is read
from its log.

    python -m benchmarks scaleout [--workers 1 2 4 8] [--json FILE] [--broker-pid PID] [--oversubscribe]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from kafka import KafkaConsumer, TopicPartition

from benchmarks import cores
from benchmarks.bench_codec import sample
from benchmarks.fleet_mix import Second, preload
from benchmarks.interpreter import describe
from benchmarks.process_usage import cpu_seconds
from trainguard.schemas.records import NodeGpuSample, Record, TrainingStep
from trainguard.schemas.topics import Topics
from trainguard.settings import load_settings
from trainguard.streams.admin import ensure_topics

TASK_LINE = re.compile(r"task \d+ (started fresh|restored)")
Workers = list[tuple[subprocess.Popen[bytes], Path]]


@dataclass(frozen=True)
class Run:
    """One drain: what ran where, and how fast."""

    workers: int
    dedicated: bool  # a core of its own for each worker
    worker_cores: tuple[int, ...]
    events: int
    wall_s: float
    cpu_s: float

    @property
    def per_s(self) -> float:
        return self.events / self.wall_s

    @property
    def per_cpu_s(self) -> float:
        return self.events / max(self.cpu_s, 1e-9)


def fleet_second(nodes: int, nodes_per_job: int, t: float, second: int) -> Iterator[Record]:
    """One second of a fleet of `nodes` nodes in jobs of `nodes_per_job` nodes."""
    gpus = sample().gpus
    for n in range(nodes):
        node, job = f"node-{n:04d}", f"job-{n // nodes_per_job:03d}"
        yield NodeGpuSample(ts=t, node=node, job=job, gpus=gpus)
        for r in range(n * 8, n * 8 + 8):
            if (second + r) % 10 == 0:
                yield TrainingStep(ts=t, job=job, rank=r, node=node, step=second // 10, loss=2.1, step_time_s=10.0)


def jobs_mix(nodes: int, nodes_per_job: int) -> Second:
    """`fleet_second` of this fleet, in the shape `fleet_mix.preload` loads."""
    return lambda t, second: fleet_second(nodes, nodes_per_job, t, second)


class GroupProgress:
    """Input records a consumer group has committed, against what the input topics hold.

    A consumer that carries the group's id but never subscribes only reads the
    group's offsets (OffsetFetch): it does not join the group or move anything.
    """

    def __init__(self, servers: str, group: str, topics: Sequence[str]) -> None:
        self._consumer = KafkaConsumer(bootstrap_servers=servers, group_id=group, enable_auto_commit=False)
        self._tps = [TopicPartition(t, p) for t in topics for p in self._consumer.partitions_for_topic(t) or ()]
        self.total = sum(self._consumer.end_offsets(self._tps).values())

    def committed(self) -> int:
        return sum(self._consumer.committed(tp) or 0 for tp in self._tps)

    def close(self) -> None:
        self._consumer.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_workers(servers: str, prefix: str, partitions: int, workdir: Path,
                  affinity: Sequence[Sequence[int]]) -> Workers:
    """One worker of one group per entry of `affinity`, each pinned to the cores its entry names (a
    child inherits this process's own, the shared cores only, so an unpinned worker must be freed)."""
    out: Workers = []
    for i, allowed in enumerate(affinity):
        config = {"broker": {"bootstrap": servers}, "topics": {"prefix": prefix, "partitions": partitions},
                  "worker": {"app_id": f"scale-{prefix}", "state_dir": str(workdir / f"{prefix}{i}"),
                             "instance": f"w{i}"}, "metrics": {"port": _free_port()}}
        path = workdir / f"{prefix}{i}.yaml"
        path.write_text(yaml.safe_dump(config))
        log = workdir / f"{prefix}{i}.log"
        argv = [sys.executable, "-m", "trainguard.cli", "-c", str(path), "worker", "--loglevel", "info"]
        proc = subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        cores.pin(proc.pid, allowed)
        out.append((proc, log))
    return out


def stop(workers: Workers) -> None:
    for proc, _ in workers:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc, _ in workers:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _alive(workers: Workers) -> None:
    for proc, log in workers:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            raise RuntimeError(f"a worker exited with {proc.returncode}: {' | '.join(tail)}")


def drain(servers: str, workdir: Path, k: int, plan: cores.CorePlan | None, have: Sequence[int],
          args: argparse.Namespace) -> Run:
    prefix = f"sc{uuid.uuid4().hex[:6]}."
    topics = Topics(prefix)
    ensure_topics(servers, topics.all(), partitions=args.partitions, replication=1, configs=topics.configs())
    preload(servers, topics, args.events_per_worker * k, jobs_mix(args.nodes, args.nodes_per_job))
    # the batch loop's group (streams/worker_factory.py); the backlog lies on the gpu and training topics
    progress = GroupProgress(servers, f"scale-{prefix}.detect", [topics.name("gpu"), topics.name("training")])
    affinity = [[c] for c in plan.workers] if plan else [have] * k
    workers = start_workers(servers, prefix, args.partitions, workdir, affinity)
    try:
        start: tuple[float, int, float] | None = None
        deadline = time.monotonic() + args.timeout_s
        while time.monotonic() < deadline:
            _alive(workers)
            done, now = progress.committed(), time.perf_counter()
            whole = start is not None or all(TASK_LINE.search(log.read_text(errors="replace")) for _, log in workers)
            if start is None and whole and done > 0:
                start = (now, done, sum(cpu_seconds(p.pid) for p, _ in workers))
            if start is not None and done >= progress.total:
                if start[1] >= progress.total:
                    raise RuntimeError("the backlog drained within one commit: raise --events-per-worker")
                cpu = sum(cpu_seconds(p.pid) for p, _ in workers) - start[2]
                return Run(k, plan is not None, plan.workers if plan else (), done - start[1], now - start[0], cpu)
            time.sleep(0.2)
        raise RuntimeError(f"{k} worker(s) did not drain the backlog within {args.timeout_s:g} s")
    finally:
        stop(workers)
        progress.close()


def takeover(servers: str, workdir: Path, have: Sequence[int], args: argparse.Namespace) -> float:
    """Seconds from SIGKILL of one of two workers to the survivor having restored its tasks."""
    prefix = f"tk{uuid.uuid4().hex[:6]}."
    topics = Topics(prefix)
    ensure_topics(servers, topics.all(), partitions=args.partitions, replication=1, configs=topics.configs())
    preload(servers, topics, args.events_per_worker // 2, jobs_mix(args.nodes, args.nodes_per_job))
    workers = start_workers(servers, prefix, args.partitions, workdir, [have, have])
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(TASK_LINE.search(log.read_text()) for _, log in workers):
            time.sleep(0.5)  # both joined the group and own tasks
        time.sleep(5)  # and committed their state
        killed_at = datetime.now()
        workers[0][0].send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 120
        pattern = re.compile(r"^\[(\S+ \S+)\] .*task \d+ restored from the changelog", re.M)
        while time.monotonic() < deadline:
            times = [datetime.strptime(m, "%Y-%m-%d %H:%M:%S,%f") for m in pattern.findall(workers[1][1].read_text())]
            if any(t > killed_at for t in times):
                time.sleep(2)
                stamps = pattern.findall(workers[1][1].read_text())
                times = [datetime.strptime(m, "%Y-%m-%d %H:%M:%S,%f") for m in stamps]
                return (max(t for t in times if t > killed_at) - killed_at).total_seconds()
            time.sleep(0.2)
        raise RuntimeError("the survivor never took over")
    finally:
        stop(workers)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_scaleout", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events-per-worker", type=int, default=150_000)
    parser.add_argument("--nodes", type=int, default=512)
    parser.add_argument("--nodes-per-job", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2, 4, 8],
                        help="worker counts (none: takeover only)")
    parser.add_argument("--reserve-cores", type=int, help="cores kept shared (default: what the largest run "
                        "leaves over, at least 1)")
    parser.add_argument("--broker-pid", type=int, help="pin this broker process to the shared cores")
    parser.add_argument("--oversubscribe", action="store_true",
                        help="measure counts without a core each too, on shared cores")
    parser.add_argument("--no-takeover", dest="takeover", action="store_false")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per drain")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the figures as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.getLogger("aiokafka").setLevel(logging.ERROR)  # a fresh topic's leader elections: retried, not news
    have = cores.available()
    reserve = args.reserve_cores or cores.reserve_for(have, max(args.workers, default=0))
    os.sched_setaffinity(0, have[:reserve])  # this process and its producer stay off the workers' cores
    try:
        report = measure(load_settings().broker.servers, have, reserve, args)
    finally:
        os.sched_setaffinity(0, have)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


def measure(servers: str, have: list[int], reserve: int, args: argparse.Namespace) -> dict[str, Any]:
    """Every requested worker count that has its cores (or all, oversubscribed), then the takeover."""
    if args.broker_pid:
        cores.pin(args.broker_pid, have[:reserve])
    print(f"interpreter: {describe()}")
    print(f"{len(have)} cores: {reserve} shared (this process{', the broker' if args.broker_pid else ''}; "
          f"the broker is {'pinned' if args.broker_pid else 'NOT pinned: it may take time from the workers'}), "
          f"{len(have) - reserve} for workers; load average {os.getloadavg()[0]:.1f}")
    runs: list[Run] = []
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tg-scale-") as tmp:
        for k in args.workers:
            plan = cores.plan(have, k, reserve)
            if plan is None and not args.oversubscribe:
                skipped.append(f"{k} workers: not measured, a core each needs {k} + {reserve} shared cores and "
                               f"this machine gives this process {len(have)}")
                print(skipped[-1], flush=True)
                continue
            runs.append(drain(servers, Path(tmp), k, plan, have, args))
            _print_run(runs[-1], runs[0])
        took = takeover(servers, Path(tmp), have, args) if args.takeover else None
    if took is not None:
        print(f"takeover after SIGKILL: {took:.1f} s (session timeout 10 s, rebalance, changelog restore)")
    return _report(have, reserve, args, runs, skipped, took)


def _print_run(run: Run, first: Run) -> None:
    where = f"a core each (cores {','.join(map(str, run.worker_cores))})" if run.dedicated else "SHARED cores"
    ratio = run.per_s / first.per_s
    print(f"{run.workers} worker(s), {where}: {run.per_s:,.0f} events/s wall ({ratio:.2f}x the first run, "
          f"efficiency {ratio * first.workers / run.workers:.0%}), {run.per_cpu_s:,.0f} events per worker "
          f"CPU-second, {run.events:,} events in {run.wall_s:.1f} s; load average {os.getloadavg()[0]:.1f}",
          flush=True)


def _report(have: list[int], reserve: int, args: argparse.Namespace, runs: list[Run], skipped: list[str],
            took: float | None) -> dict[str, Any]:
    return {"interpreter": describe(), "cores": len(have), "shared_cores": reserve,
            "broker_pinned": bool(args.broker_pid),
            "partitions": args.partitions, "events_per_worker": args.events_per_worker,
            "load_average": os.getloadavg()[0],
            "runs": [{**asdict(r), "events_per_s": round(r.per_s), "events_per_cpu_s": round(r.per_cpu_s)}
                     for r in runs],
            "not_measured": skipped, "takeover_s": took}


if __name__ == "__main__":
    raise SystemExit(main())
