"""The Faust worker, built by a factory from settings (no module-level app).

One agent per input topic, each with concurrency 1 (faust #606: higher
concurrency can commit offsets past unprocessed messages). Agents take
events in batches to amortise Faust's per-event overhead and hand the raw
bytes to one shared `MessageProcessor`; since agents run on one event loop
and processing is synchronous, the detectors' state is never touched
concurrently.

By default (`worker.fast_path`) the input side is instead one batch loop
(`streams.fastpath`), which avoids Faust's per-message overhead; the Faust
app still hosts it, the metrics endpoint and the timers.
"""

from __future__ import annotations

import time
from typing import Any

import faust
from faust.types import TP

from detectors.pipeline import DetectionPipeline
from schemas.kafka_config import client_options
from schemas.topics import INPUT_TOPICS, Topics
from streams.fastpath import BatchLoop
from streams.idle import IdleClock
from streams.metrics import WorkerMetrics, detector_state_sizes
from streams.processor import MessageProcessor, OutMessage, RawMessage
from streams.settings import WorkerConfig


def create_app(settings: WorkerConfig, processor: MessageProcessor | None = None) -> faust.App:
    """Build the worker app: topics, agents, idle timer."""
    topics = Topics(settings.topics.prefix)
    settings.worker.state_dir.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        settings.worker.app_id,
        broker=f"kafka://{settings.broker.servers}",
        store="memory://",
        datadir=str(settings.worker.state_dir),
        topic_partitions=settings.topics.partitions,
        topic_replication_factor=settings.topics.replication,
        web_enabled=False,
        consumer_auto_offset_reset="earliest",
        **client_options(settings.broker, "faust"),
    )
    signer = settings.security.signer("worker") if settings.security.worker_private_key else None
    proc = processor or MessageProcessor(DetectionPipeline.from_settings(settings.detectors), topics, signer=signer)
    app.trainguard_processor = proc  # type: ignore[attr-defined]  # for tests and metrics
    metrics = _metrics(app, settings, proc, topics) if settings.metrics.enabled else None
    outputs = {name: app.topic(topics.name(name), value_serializer="raw", key_serializer="raw")
               for name in ("anomalies", "incidents", "dead-letter")}
    by_physical = {t.get_topic_name(): t for t in outputs.values()}
    idle = IdleClock()
    batch, within = settings.worker.batch_size, settings.worker.batch_within_s

    async def emit(messages: list[OutMessage]) -> None:
        if metrics is not None and messages:
            metrics.count_outputs(messages)
        for out in messages:
            await by_physical[out.topic].send(key=out.key, value=out.value, headers=out.headers)

    if settings.worker.fast_path:
        _run_batch_loop(app, settings, proc, topics, metrics)
    for logical in () if settings.worker.fast_path else INPUT_TOPICS:
        source = app.topic(topics.name(logical), value_serializer="raw", key_serializer="raw")

        async def consume(stream: Any) -> None:
            async for events in stream.take_events(batch, within=within):
                raws = [_raw(e) for e in events]
                started = time.perf_counter()
                await emit(proc.process_batch(raws))
                if metrics is not None:
                    metrics.observe_batch(raws, time.perf_counter() - started, proc.pipeline.watermark)
                idle.saw(proc.pipeline.watermark)

        app.agent(source, name=f"trainguard.detect.{logical}", concurrency=1)(consume)

    @app.timer(1.0)
    async def advance_when_idle() -> None:
        ts = idle.idle_watermark()
        if ts is not None:
            await emit(proc.advance(ts))

    return app


def _metrics(app: faust.App, settings: WorkerConfig, proc: MessageProcessor, topics: Topics) -> WorkerMetrics:
    """The worker's Prometheus metrics; the HTTP endpoint only when a port is set."""
    metrics = WorkerMetrics(stats=proc.stats, topics=topics, state_sizes=detector_state_sizes(proc.pipeline.detectors))
    app.trainguard_metrics = metrics  # type: ignore[attr-defined]

    @app.timer(settings.metrics.lag_interval_s)
    async def refresh_lag() -> None:
        metrics.refresh_lag(lambda topic, partition: _highwater(app, topic, partition))

    if settings.metrics.port > 0:

        @app.task
        async def serve_metrics() -> None:
            app.trainguard_metrics_server = metrics.serve(settings.metrics.port)  # type: ignore[attr-defined]

    return metrics


def _run_batch_loop(app: faust.App, settings: WorkerConfig, proc: MessageProcessor, topics: Topics,
                    metrics: WorkerMetrics | None) -> None:
    """Run the input side as one batch loop (streams.fastpath) instead of per-topic agents."""
    loop = BatchLoop(servers=settings.broker.servers, topics=topics, processor=proc,
                     group_id=f"{settings.worker.app_id}.detect", metrics=metrics,
                     max_records=settings.worker.fetch_max_records, poll_timeout_s=settings.worker.batch_within_s,
                     lag_interval_s=settings.metrics.lag_interval_s,
                     client_options=client_options(settings.broker, "aiokafka"))
    app.trainguard_batch_loop = loop  # type: ignore[attr-defined]

    @app.task
    async def consume_batches() -> None:
        await loop.run()


def _highwater(app: faust.App, topic: str, partition: int) -> int | None:
    try:
        return int(app.consumer.highwater(TP(topic, partition)))
    except Exception:  # not assigned (yet) or no fetch seen: unknown, not zero
        return None


def _raw(event: Any) -> RawMessage:
    msg = event.message
    return RawMessage(
        topic=msg.topic,
        value=msg.value,
        key=msg.key,
        partition=msg.partition,
        offset=msg.offset,
        timestamp=(msg.timestamp or 0.0),
    )
