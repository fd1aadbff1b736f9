"""Scale-out: the same backlog drained by 1, 2 and 4 workers of one group, and a takeover after SIGKILL.

The backlog is the `bench_pipeline` mix for a fleet split into many jobs (a
job's evidence shares a partition, so one job cannot be split; many jobs
can). Each run gets fresh topics with `--partitions` partitions and the same
events. Reported per run: wall-clock drain rate, events per CPU-second summed
over the workers, and the ratio to one worker. On a machine with fewer free
cores than workers the wall-clock figure cannot scale; the CPU figure shows
what the workers cost.

Takeover: two workers share a backlog; one is killed with SIGKILL; the time
until the survivor reports having restored the killed one's tasks is read
from its log.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path

import yaml

from benchmarks.bench_pipeline import _producer, _send_all, cpu_seconds, processed, sample
from schemas.codec import Codec
from schemas.records import NodeGpuSample, Record, TrainingStep
from schemas.topics import Topics
from streams.admin import ensure_topics
from trainguard.settings import load_settings


def fleet_second(nodes: int, nodes_per_job: int, t: float, second: int) -> Iterator[Record]:
    """One second of a fleet of `nodes` nodes in jobs of `nodes_per_job` nodes."""
    gpus = sample().gpus
    for n in range(nodes):
        node, job = f"node-{n:04d}", f"job-{n // nodes_per_job:03d}"
        yield NodeGpuSample(ts=t, node=node, job=job, gpus=gpus)
        for r in range(n * 8, n * 8 + 8):
            if (second + r) % 10 == 0:
                yield TrainingStep(ts=t, job=job, rank=r, node=node, step=second // 10, loss=2.1, step_time_s=10.0)


def preload(servers: str, topics: Topics, nodes: int, per_job: int, count: int) -> int:
    import asyncio

    async def run() -> int:
        producer, sent, second, t0 = _producer(servers), 0, 0, time.time() - 3600
        await producer.start()
        try:
            while sent < count:
                sent += await _send_all(producer, Codec(), topics, fleet_second(nodes, per_job, t0 + second, second))
                second += 1
        finally:
            await producer.stop()
        return sent

    return asyncio.run(run())


def start_workers(servers: str, prefix: str, partitions: int, workdir: Path,
                  k: int) -> list[tuple[subprocess.Popen[bytes], int, Path]]:
    out = []
    for i in range(k):
        port = 21_000 + uuid.uuid4().int % 2000
        config = {"broker": {"bootstrap": servers}, "topics": {"prefix": prefix, "partitions": partitions},
                  "worker": {"app_id": f"scale-{prefix}", "state_dir": str(workdir / f"{prefix}{i}"),
                             "instance": f"w{i}"}, "metrics": {"port": port}}
        path = workdir / f"{prefix}{i}.yaml"
        path.write_text(yaml.safe_dump(config))
        log = workdir / f"{prefix}{i}.log"
        argv = [sys.executable, "-m", "trainguard.cli", "-c", str(path), "worker", "--loglevel", "info"]
        proc = subprocess.Popen(argv,
                                stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        out.append((proc, port, log))
    return out


def stop(workers: list[tuple[subprocess.Popen[bytes], int, Path]]) -> None:
    for proc, _, _ in workers:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc, _, _ in workers:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def drain(servers: str, partitions: int, workdir: Path, k: int, args: argparse.Namespace) -> tuple[float, float]:
    prefix = f"sc{uuid.uuid4().hex[:6]}."
    topics = Topics(prefix)
    ensure_topics(servers, topics.all(), partitions=partitions, replication=1, configs=topics.configs())
    total = preload(servers, topics, args.nodes, args.nodes_per_job, args.events)
    workers = start_workers(servers, prefix, partitions, workdir, k)
    try:
        first = None
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            counts = [processed(port) for _, port, _ in workers]
            done = sum(c or 0 for c in counts)
            now, cpu = time.perf_counter(), sum(cpu_seconds(p.pid) for p, _, _ in workers)
            if done and first is None and all(c is not None for c in counts):
                first = (now, cpu, done)
            if first is not None and done >= total:
                return (done - first[2]) / (now - first[0]), (done - first[2]) / max(1e-9, cpu - first[1])
            time.sleep(0.1)
        raise RuntimeError("the workers did not drain the backlog within 10 minutes")
    finally:
        stop(workers)


def takeover(servers: str, partitions: int, workdir: Path, args: argparse.Namespace) -> float:
    """Seconds from SIGKILL of one of two workers to the survivor having restored its tasks."""
    prefix = f"tk{uuid.uuid4().hex[:6]}."
    topics = Topics(prefix)
    ensure_topics(servers, topics.all(), partitions=partitions, replication=1, configs=topics.configs())
    preload(servers, topics, args.nodes, args.nodes_per_job, args.events // 4)
    workers = start_workers(servers, prefix, partitions, workdir, 2)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(re.search(r"task \d+ (started fresh|restored)", log.read_text())
                                                      for _, _, log in workers):
            time.sleep(0.5)  # both joined the group and own tasks
        time.sleep(5)  # and committed their state
        killed_at = datetime.now()
        workers[0][0].send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 120
        pattern = re.compile(r"^\[(\S+ \S+)\] .*task \d+ restored from the changelog", re.M)
        while time.monotonic() < deadline:
            times = [datetime.strptime(m, "%Y-%m-%d %H:%M:%S,%f") for m in pattern.findall(workers[1][2].read_text())]
            after = [t for t in times if t > killed_at]
            if after:
                time.sleep(2)
                stamps = pattern.findall(workers[1][2].read_text())
                times = [datetime.strptime(m, "%Y-%m-%d %H:%M:%S,%f") for m in stamps]
                return (max(t for t in times if t > killed_at) - killed_at).total_seconds()
            time.sleep(0.2)
        raise RuntimeError("the survivor never took over")
    finally:
        stop(workers)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_scaleout", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--nodes-per-job", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2, 4], help="worker counts (none: takeover only)")
    args = parser.parse_args(argv)
    servers = load_settings().broker.servers
    with tempfile.TemporaryDirectory(prefix="tg-scale-") as tmp:
        base = None
        for k in args.workers:
            wall, per_cpu = drain(servers, args.partitions, Path(tmp), k, args)
            base = base or wall
            print(f"{k} worker(s): {wall:,.0f} events/s wall ({wall / base:.2f}x one worker), "
                  f"{per_cpu:,.0f} events per worker CPU-second; load average {os.getloadavg()[0]:.1f} "
                  f"on {os.cpu_count()} cores")
        print(f"takeover after SIGKILL: {takeover(servers, args.partitions, Path(tmp), args):.1f} s "
              "(session timeout 10 s, rebalance, changelog restore)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
