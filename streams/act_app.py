"""`trainguard act` as a Faust app, built by a factory from settings (no module-level app).

One agent per subscription, all feeding one `ActCore`:

* `state`: checkpoints and the training topic (topologies, steps), in
  batches: this is the busy topic, and each record costs a few microseconds;
* `incidents`: one decision per incident, journaled before the agent moves
  on, so Faust commits the incident's offset only after it is durable;
* `results`: the agents' answers, audited.

`subscribe` is how another subscription is added (an operator topic, say):
a topic, a record handler, done.

Before deciding, the incidents agent waits (briefly, bounded) until the
state agent has processed everything the state topics held when the
incident arrived: "which checkpoint precedes the onset?" must not be
answered from a half-read topic. When state keeps up, the wait is nil.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import faust
from faust.types import TP

from schemas.codec import Codec, DecodeError
from schemas.kafka_config import client_options
from schemas.records import Incident, Record
from schemas.topics import Topics
from streams.action_consumer import ActCore
from streams.settings import ActConfig

log = logging.getLogger(__name__)
Handler = Callable[[Record], None]


class Trust(Protocol):
    """`ActCore.trusts`: may this record, with these exact bytes and headers, be acted on?"""

    def __call__(self, record: Record, value: bytes, headers: Sequence[tuple[str, bytes]] | None, *,
                 topic: str = ..., offset: int = ...) -> bool: ...

STATE_TOPICS = ("checkpoints", "training")


def create_act_app(settings: ActConfig, core: ActCore, *, max_incidents: int | None = None,
                   timeout_s: float | None = None) -> faust.App:
    """Build the act app around `core`; stops itself after `max_incidents` decisions or `timeout_s`."""
    cfg = settings.actions
    topics = Topics(settings.topics.prefix)
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    app = faust.App(cfg.group_id, broker=f"kafka://{settings.broker.servers}", store="memory://",
                    datadir=str(cfg.state_dir / "faust"), topic_partitions=settings.topics.partitions,
                    topic_replication_factor=settings.topics.replication, web_enabled=False,
                    consumer_auto_offset_reset="earliest", broker_commit_every=100, broker_commit_interval=0.5,
                    **client_options(settings.broker, "faust"))
    app.trainguard_core = core  # type: ignore[attr-defined]
    codec = Codec()
    progress: dict[TP, int] = {}  # state partition -> next offset to process

    async def state(stream: Any) -> None:
        async for events in stream.take_events(1000, within=0.05):
            for event in events:
                _handle(codec, event.message, core.observe)
                msg = event.message
                progress[TP(msg.topic, msg.partition)] = msg.offset + 1

    state_topic = app.topic(*(topics.name(t) for t in STATE_TOPICS), value_serializer="raw", key_serializer="raw")
    app.agent(state_topic, name="trainguard.act.state", concurrency=1)(state)

    async def incidents(stream: Any) -> None:
        async for event in stream.events():
            msg = event.message
            try:
                record = codec.decode(msg.value)
            except DecodeError:
                continue  # the worker dead-letters malformed input; here it is only skipped
            if not isinstance(record, Incident):
                continue
            if not core.trusts(record, msg.value, _headers(msg), topic=msg.topic, offset=msg.offset):
                continue  # unsigned where the worker's signature is required: audited, not acted on
            await _caught_up(app, progress, [topics.name(t) for t in STATE_TOPICS], cfg.state_wait_s)
            core.decide(record)  # journaled before this returns; the offset is acked after

    incident_topic = app.topic(topics.name("incidents"), value_serializer="raw", key_serializer="raw")
    app.agent(incident_topic, name="trainguard.act.incidents", concurrency=1)(incidents)
    subscribe(app, topics.name("action-results"), core.observe, name="trainguard.act.results", trust=core.trusts)
    subscribe(app, topics.name("operator"), core.observe, name="trainguard.act.operator")

    @app.task
    async def resume_at_start() -> None:
        core.resume()  # plans a killed act left unfinished

    @app.timer(1.0)
    async def operator_requests() -> None:
        core.resume()  # approvals, breaker resets, node returns left in the journal by `trainguard actions`
        core.show_rails()  # the console's view of the breaker and the pool

    started = time.monotonic()

    @app.timer(0.2)
    async def stop_when_done() -> None:
        done = max_incidents is not None and core.decided >= max_incidents and not core.busy
        late = timeout_s is not None and time.monotonic() - started > timeout_s
        if done or late:
            os.kill(os.getpid(), signal.SIGTERM)  # mode's worker shuts down cleanly on SIGTERM

    return app


def subscribe(app: faust.App, topic: str, handler: Handler, *, name: str, trust: Trust | None = None) -> None:
    """One more agent: decode each record of `topic` and hand it to `handler` (synchronously).

    With `trust`, only records it accepts (given their exact bytes and headers:
    signatures) are handed over; it audits the others.
    """
    codec = Codec()

    async def consume(stream: Any) -> None:
        async for events in stream.take_events(100, within=0.05):
            for event in events:
                _handle(codec, event.message, handler, trust)

    app.agent(app.topic(topic, value_serializer="raw", key_serializer="raw"), name=name, concurrency=1)(consume)


def _handle(codec: Codec, message: Any, handler: Handler, trust: Trust | None = None) -> None:
    try:
        record = codec.decode(message.value)
    except DecodeError:
        return
    if trust is not None and not trust(record, message.value, _headers(message),
                                       topic=message.topic, offset=message.offset):
        return
    handler(record)


def _headers(message: Any) -> list[tuple[str, bytes]]:
    """A Faust message's headers as (name, bytes) pairs (Faust may hand over a mapping or a sequence)."""
    headers = message.headers or ()
    items = headers.items() if isinstance(headers, dict) else headers
    return [(str(k), bytes(v or b"")) for k, v in items]


async def _caught_up(app: faust.App, progress: dict[TP, int], names: list[str], wait_s: float) -> None:
    """Wait until the state agent processed what the state topics held now (at most `wait_s`)."""
    try:
        assigned = [tp for tp in app.consumer.assignment() if tp.topic in names]
        targets = {tp: int(app.consumer.highwater(tp) or 0) for tp in assigned}
    except Exception:  # not assigned yet / no fetch yet: nothing known to wait for
        return
    deadline = time.monotonic() + wait_s
    while any(progress.get(tp, _committed(app, tp)) < hw for tp, hw in targets.items()):
        if time.monotonic() > deadline:
            log.warning("deciding before the state topics caught up (%.1fs)", wait_s)
            return
        await asyncio.sleep(0.01)


def _committed(app: faust.App, tp: TP) -> int:
    """Where the state agent starts on a partition it has not processed anything of yet."""
    try:
        return int(app.consumer._committed_offset.get(tp) or 0)  # type: ignore[attr-defined]  # noqa: SLF001
    except Exception:
        return 0
