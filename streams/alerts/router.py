"""Post incidents and decisions to Alertmanager and a Slack-style webhook: the I/O edge.

Reads the incidents and decisions topics as its own consumer group, so it
runs beside `act` without taking anything from it, and posts each record
through a per-destination rate limit (actions/alerts.py builds the
payloads). Alerts are best effort: a failed post is retried once and then
reported on stderr, while the records themselves stay on Kafka and in the
decisions log. Offsets are committed after each batch is routed.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainguard.actions.alerts import TokenBucket, alertmanager_alert, slack_message
from trainguard.schemas.codec import Codec, DecodeError
from trainguard.schemas.kafka_config import BrokerSettings
from trainguard.schemas.records import Decision, Incident
from trainguard.schemas.topics import Topics


class AlertError(Exception):
    """A webhook did not accept the post."""


def post_json(url: str, payload: Any, *, timeout_s: float = 5.0) -> None:
    """POST `payload` as JSON; AlertError unless the answer is 2xx."""
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - configured URL
            if not 200 <= response.status < 300:
                raise AlertError(f"{response.status}")
    except urllib.error.HTTPError as exc:
        raise AlertError(f"HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise AlertError(str(getattr(exc, "reason", exc))) from None


@dataclass
class AlertSink:
    """One destination: how to shape a record for it, where to send it, and its rate limit."""

    name: str
    url: str
    shape: Callable[[Incident | Decision, int], Any]
    bucket: TokenBucket


class AlertRouter:
    """Route records to the configured sinks."""

    def __init__(self, sinks: list[AlertSink], *, post: Callable[[str, Any], None] = post_json) -> None:
        self.sinks = sinks
        self.post = post
        self.sent = 0
        self.failed = 0

    @classmethod
    def build(cls, *, alertmanager_url: str = "", slack_url: str = "", per_minute: float = 6, burst: int = 3,
              clock: Callable[[], float] = time.monotonic) -> AlertRouter:
        """Sinks for the URLs given, each with its own bucket."""
        sinks = []
        if alertmanager_url:
            sinks.append(AlertSink("alertmanager", alertmanager_url, lambda r, _n: [alertmanager_alert(r)],
                              TokenBucket(per_minute, burst, clock)))
        if slack_url:
            sinks.append(AlertSink("slack", slack_url, lambda r, n: slack_message(r, suppressed=n),
                              TokenBucket(per_minute, burst, clock)))
        return cls(sinks)

    def route(self, record: Incident | Decision) -> list[str]:
        """Post one record to every sink whose rate limit allows it; the sinks it went to."""
        went = []
        for sink in self.sinks:
            if not sink.bucket.allow():
                continue
            payload = sink.shape(record, sink.bucket.take_suppressed())
            for attempt in (1, 2):
                try:
                    self.post(sink.url, payload)
                    went.append(sink.name)
                    self.sent += 1
                    break
                except AlertError as exc:
                    if attempt == 2:
                        self.failed += 1
                        print(f"trainguard alerts: {sink.name} {sink.url.split('?')[0]}: {exc}", file=sys.stderr)
        return went

    def run(self, broker: BrokerSettings | str, topics: Topics, *, group_id: str, from_beginning: bool = False,
            max_records: int | None = None, timeout_s: float | None = None) -> int:
        """Consume incidents and decisions until `max_records` are routed or `timeout_s` passes.

        The consumer is built by `streams.kafka_io` from the configured `BrokerSettings`, so the
        router reaches a TLS / SASL cluster like every other client.
        """
        from trainguard.streams import kafka_io

        consumer = kafka_io.consumer(kafka_io.as_broker(broker), topics.name("incidents"), topics.name("decisions"),
                                     group_id=group_id, auto_offset_reset="earliest" if from_beginning else "latest")
        codec = Codec()
        seen = 0
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            while (max_records is None or seen < max_records) and (deadline is None or time.monotonic() < deadline):
                for messages in consumer.poll(timeout_ms=500).values():
                    for message in messages:
                        try:
                            record = codec.decode(message.value)
                        except DecodeError:
                            continue  # the worker dead-letters bad records; alerts only skip them
                        if isinstance(record, (Incident, Decision)):
                            self.route(record)
                            seen += 1
                consumer.commit()
        finally:
            consumer.close()
        return seen
