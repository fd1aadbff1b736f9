"""The Faust worker, built by a factory from settings (no module-level app).

One way in: the input side is the batch loop (`streams.worker.batch_loop`), one
aiokafka consumer handing whole fetches to one `MessageProcessor`, with
guarded event time and exactly-once commits. Faust's per-message agents
measured 14x slower and are gone. The Faust App hosts what it is good at:
the loop as a task, timers, and its web server for `/metrics`, `/healthz`
and `/readyz` (when `metrics.port` is set).
"""

from __future__ import annotations

import socket
from typing import Any

import faust
from prometheus_client import CONTENT_TYPE_LATEST

from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.schemas.kafka_config import client_options
from trainguard.schemas.topics import Topics
from trainguard.streams.settings import WorkerConfig
from trainguard.streams.worker.backpressure import Backpressure
from trainguard.streams.worker.batch_loop import BatchLoop
from trainguard.streams.worker.metrics import StateCensus, WorkerMetrics
from trainguard.streams.worker.skew import ClockSkewEstimator
from trainguard.streams.worker.tasks import NodeJobTable, TaskFactory
from trainguard.streams.worker.watermark import EventClock


def create_worker_app(settings: WorkerConfig) -> faust.App:
    """Build the worker app: the batch loop task and the web endpoints."""
    topics = Topics(settings.topics.prefix)
    settings.worker.state_dir.mkdir(parents=True, exist_ok=True)
    port = settings.metrics.port if settings.metrics.enabled else 0
    app = faust.App(
        settings.worker.app_id,
        broker=f"kafka://{settings.broker.servers}",
        store="memory://",
        datadir=str(settings.worker.state_dir),
        topic_partitions=settings.topics.partitions,
        topic_replication_factor=settings.topics.replication,
        web_enabled=port > 0,
        web_port=port or settings.worker.web_port,
        web_bind="0.0.0.0",
        consumer_auto_offset_reset="earliest",
        # Faust's own (topic-less) group member must not hold a restarted worker back for
        # its default 60 s session timeout after a SIGKILL: the batch loop starts after it.
        broker_session_timeout=10.0,
        broker_heartbeat_interval=3.0,
        **client_options(settings.broker, "faust"),
    )
    signer = settings.security.signer("worker") if settings.security.worker_private_key else None
    w = settings.worker
    factory = TaskFactory(topics=topics, partitions=settings.topics.partitions,
                          new_pipeline=lambda: DetectionPipeline.from_settings(settings.detectors),
                          new_clock=lambda: EventClock(max_ahead_s=w.max_ahead_s, idle_after_s=w.idle_after_s,
                                                       confirm_within=w.confirm_within),
                          table=NodeJobTable(), signer=signer,
                          new_skew=lambda: ClockSkewEstimator(bound_s=w.clock_skew_bound_s))
    loop = BatchLoop(broker=settings.broker, topics=topics, factory=factory, group_id=f"{w.app_id}.detect",
                     max_records=w.fetch_max_records, poll_timeout_s=w.batch_within_s,
                     lag_interval_s=settings.metrics.lag_interval_s, commit_interval_s=w.commit_interval_s,
                     exactly_once=w.exactly_once, instance=w.instance or socket.gethostname(),
                     backpressure=Backpressure.at(w.max_waiting_records))
    app.trainguard_batch_loop = loop  # type: ignore[attr-defined]
    metrics = None
    if settings.metrics.enabled:
        metrics = loop.metrics = WorkerMetrics(stats=factory.stats, topics=topics, census=StateCensus())
        app.trainguard_metrics = metrics  # type: ignore[attr-defined]

    @app.task
    async def consume_batches() -> None:
        await loop.run()

    if port > 0:
        _pages(app, loop, metrics)
    return app


def _pages(app: faust.App, loop: BatchLoop, metrics: WorkerMetrics | None) -> None:
    """/metrics (Prometheus), /healthz (the process answers), /readyz (assigned, state restored)."""

    @app.page("/metrics")
    async def metrics_page(web: Any, request: Any) -> Any:
        body = metrics.render() if metrics is not None else b""
        return web.bytes(body, content_type=CONTENT_TYPE_LATEST.split(";")[0])

    @app.page("/healthz")
    async def healthz(web: Any, request: Any) -> Any:
        return web.json({"ok": True})

    @app.page("/readyz")
    async def readyz(web: Any, request: Any) -> Any:
        return web.json({"ready": loop.ready}, status=200 if loop.ready else 503)
