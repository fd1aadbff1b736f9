"""`trainguard collect`: run the enabled node collectors and publish what they see."""

from __future__ import annotations

import argparse
import logging
import signal
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from trainguard.cli.errors import UsageError
from trainguard.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("collect", help="run the node collectors (GPU via NVML or dcgm-exporter, RDMA, logs)",
                       description="Sample GPUs through NVML (or scrape the node's dcgm-exporter instead) and RDMA "
                       "ports through sysfs on their intervals, follow the kernel log and training log files, and "
                       "publish everything to Kafka, spooling to disk while the broker is unreachable. Each "
                       "collector reports its success and duration as Prometheus metrics (metrics.port) and a "
                       "log line.")
    p.add_argument("--node", help="node name (default: collectors.node, else NODE_NAME, else the hostname)")
    p.add_argument("--job", default="", help="job this node serves, if dedicated to one (default: none)")
    p.add_argument("--no-gpu", action="store_true", help="disable the GPU collector")
    p.add_argument("--source", choices=["nvml", "dcgm-exporter"],
                   help="GPU readings from NVML or from the node's dcgm-exporter (default: collectors.gpu_source)")
    p.add_argument("--url", help="dcgm-exporter's metrics URL (default: collectors.dcgm_exporter_url, "
                   "http://localhost:9400/metrics)")
    p.add_argument("--npd", action="store_true", help="also read node-problem-detector's conditions and events for "
                   "this node from the Kubernetes API (default: collectors.npd)")
    p.add_argument("--kube-host", help="Kubernetes API URL for --npd (default: collectors.kube_host, else "
                   "kubeconfig / in-cluster)")
    p.add_argument("--no-rdma", action="store_true", help="disable the RDMA collector")
    p.add_argument("--no-kernel-log", action="store_true", help="do not follow the kernel log")
    p.add_argument("--rdma-root", type=Path, help="sysfs infiniband root (default: collectors.rdma_root)")
    p.add_argument("--log-file", type=Path, action="append", default=[], help="training log file to follow")
    p.add_argument("--duration", type=float, help="stop after this many seconds (default: run until signalled)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every collector run")
    p.set_defaults(handler=run)


def build_loop(args: argparse.Namespace, settings: Settings) -> tuple[Any, Any]:
    """The node loop with every enabled collector, and its publisher."""
    from trainguard.collectors.logs import FileFollower, KernelLog, LogParser
    from trainguard.collectors.metrics import CollectorMetrics
    from trainguard.collectors.node import LineSource, NodeLoop
    from trainguard.collectors.publisher import Publisher
    from trainguard.collectors.rdma import RdmaCollector
    from trainguard.schemas.kafka_config import client_options
    from trainguard.schemas.topics import Topics
    from trainguard.topology import node_name

    cs = settings.collectors
    node = args.node or cs.node or node_name()
    gpu = gpu_collector(args, settings, node) if cs.gpu and not args.no_gpu else None  # bad --url: stop first
    npd = npd_watcher(args, settings, node) if cs.npd or args.npd else None
    publisher = Publisher(servers=settings.broker.servers, topics=Topics(settings.topics.prefix),
                          spool_dir=cs.spool_dir / "collect", spool_max_bytes=int(cs.spool_max_mb * 1024 * 1024),
                          client_id=f"trainguard-collect-{node}", sync=cs.spool_sync,
                          client_options=client_options(settings.broker, "kafka-python"))
    loop = NodeLoop(sink=publisher, metrics=CollectorMetrics())
    if gpu is not None:
        loop.add(gpu, interval_s=cs.gpu_interval_s)
    if cs.rdma and not args.no_rdma:
        loop.add(RdmaCollector(node=node, job=args.job, root=args.rdma_root or cs.rdma_root),
                 interval_s=cs.rdma_interval_s)
    if cs.kernel_log and not args.no_kernel_log:
        loop.add(LineSource(name="kernel_log", reader=KernelLog(cs.kernel_log_path),
                            parser=LogParser(node=node, source="kernel", job=args.job)), interval_s=cs.log_interval_s)
    if npd is not None:
        loop.add(npd, interval_s=cs.npd_interval_s)
    for path in [*cs.log_files, *args.log_file]:
        loop.add(LineSource(name=f"log:{path.name}", reader=FileFollower(path),
                            parser=LogParser(node=node, source=str(path), job=args.job)), interval_s=cs.log_interval_s)
    return loop, publisher


def gpu_collector(args: argparse.Namespace, settings: Settings, node: str) -> Any:
    """The GPU collector of the chosen source: NVML, or a scrape of the node's dcgm-exporter."""
    cs = settings.collectors
    if (args.source or cs.gpu_source) == "nvml":
        if args.url:
            raise UsageError("collect: --url is dcgm-exporter's; add --source dcgm-exporter")
        from trainguard.collectors.nvml import GpuCollector

        return GpuCollector(node=node, job=args.job, timeout_s=cs.nvml_timeout_s)
    url = args.url or cs.dcgm_exporter_url
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise UsageError(f"collect: --url {url!r} is not an http(s) URL (e.g. http://localhost:9400/metrics)")
    from trainguard.collectors.dcgm_source import DcgmExporterCollector

    return DcgmExporterCollector(node=node, job=args.job, url=url, timeout_s=cs.dcgm_exporter_timeout_s)


def npd_watcher(args: argparse.Namespace, settings: Settings, node: str) -> Any:
    """The node-problem-detector watcher for this node; a Kubernetes config that cannot load stops us here."""
    from trainguard.collectors.npd import NpdWatcher

    cs = settings.collectors
    try:
        return NpdWatcher.connect(node=node, host=args.kube_host or cs.kube_host, kubeconfig=cs.kubeconfig,
                                  job=args.job)
    except Exception as exc:  # the kubernetes client's config errors have no common base class
        raise UsageError(f"collect: --npd needs the Kubernetes API (collectors.kube_host, collectors.kubeconfig or "
                         f"an in-cluster service account): {type(exc).__name__}: {exc}") from None


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
