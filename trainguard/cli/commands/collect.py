"""`trainguard collect`: run the enabled node collectors and publish what they see."""

from __future__ import annotations

import argparse
import logging
import signal
from pathlib import Path
from typing import Any

from trainguard.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("collect", help="run the node collectors (GPU/NVML, RDMA, kernel and training logs)",
                       description="Sample GPUs through NVML and RDMA ports through sysfs on their intervals, "
                       "follow the kernel log and training log files, and publish everything to Kafka, spooling "
                       "to disk while the broker is unreachable. Each collector reports its success and duration "
                       "as Prometheus metrics (metrics.port) and a log line.")
    p.add_argument("--node", help="node name (default: collectors.node, else NODE_NAME, else the hostname)")
    p.add_argument("--job", default="", help="job this node serves, if dedicated to one (default: none)")
    p.add_argument("--no-gpu", action="store_true", help="disable the NVML collector")
    p.add_argument("--no-rdma", action="store_true", help="disable the RDMA collector")
    p.add_argument("--no-kernel-log", action="store_true", help="do not follow the kernel log")
    p.add_argument("--rdma-root", type=Path, help="sysfs infiniband root (default: collectors.rdma_root)")
    p.add_argument("--log-file", type=Path, action="append", default=[], help="training log file to follow")
    p.add_argument("--duration", type=float, help="stop after this many seconds (default: run until signalled)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every collector run")
    p.set_defaults(handler=run)


def build_loop(args: argparse.Namespace, settings: Settings) -> tuple[Any, Any]:
    """The node loop with every enabled collector, and its publisher."""
    from collectors.logs import FileFollower, KernelLog, LogParser
    from collectors.metrics import CollectorMetrics
    from collectors.node import LineSource, NodeLoop
    from collectors.nvml import GpuCollector
    from collectors.publisher import Publisher
    from collectors.rdma import RdmaCollector
    from schemas.kafka_config import client_options
    from schemas.topics import Topics
    from trainguard.topology import node_name

    cs = settings.collectors
    node = args.node or cs.node or node_name()
    publisher = Publisher(servers=settings.broker.servers, topics=Topics(settings.topics.prefix),
                          spool_dir=cs.spool_dir / "collect", spool_max_bytes=int(cs.spool_max_mb * 1024 * 1024),
                          client_id=f"trainguard-collect-{node}", sync=cs.spool_sync,
                          client_options=client_options(settings.broker, "kafka-python"))
    loop = NodeLoop(sink=publisher, metrics=CollectorMetrics())
    if cs.gpu and not args.no_gpu:
        loop.add(GpuCollector(node=node, job=args.job, timeout_s=cs.nvml_timeout_s), interval_s=cs.gpu_interval_s)
    if cs.rdma and not args.no_rdma:
        loop.add(RdmaCollector(node=node, job=args.job, root=args.rdma_root or cs.rdma_root),
                 interval_s=cs.rdma_interval_s)
    if cs.kernel_log and not args.no_kernel_log:
        loop.add(LineSource(name="kernel_log", reader=KernelLog(cs.kernel_log_path),
                            parser=LogParser(node=node, source="kernel", job=args.job)), interval_s=cs.log_interval_s)
    for path in [*cs.log_files, *args.log_file]:
        loop.add(LineSource(name=f"log:{path.name}", reader=FileFollower(path),
                            parser=LogParser(node=node, source=str(path), job=args.job)), interval_s=cs.log_interval_s)
    return loop, publisher


def run(args: argparse.Namespace, settings: Settings) -> int:
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING if args.verbose else logging.CRITICAL)  # chatty
    loop, publisher = build_loop(args, settings)
    if settings.metrics.enabled and settings.metrics.port:
        from prometheus_client import start_http_server

        start_http_server(settings.metrics.port, registry=loop.metrics.registry)
    signal.signal(signal.SIGTERM, lambda *_: loop.stop_event.set())
    try:
        loop.run(max_seconds=args.duration)
    except KeyboardInterrupt:
        pass
    finally:
        loop.close()
        delivered = publisher.close(timeout_s=10)
        stats = publisher.stats()
        print(f"collect: sent {stats['sent']} records, {stats['spooled']} left spooled"
              f"{'' if delivered else ' (broker unreachable; sent on next start)'}, "
              f"dropped {stats['dropped_low_value']} low-value + {stats['dropped_other']} other")
    return 0
