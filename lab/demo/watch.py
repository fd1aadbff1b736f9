"""Follow the pipeline's topics in the background, for the demo and its test.

One kafka-python consumer reads every topic of the demo's prefix from the
beginning into per-type lists. `wait_for` polls those lists with a
predicate, so the orchestrator can say "wait until a hang incident appears"
without managing consumers itself.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any, TypeVar

from kafka import KafkaConsumer

from trainguard.schemas.codec import Codec, DecodeError
from trainguard.schemas.records import Heartbeat, Record, TrainingStep
from trainguard.schemas.topics import Topics

R = TypeVar("R", bound=Record)


class TopicWatcher:
    """Background reader of all topics under one prefix."""

    def __init__(self, servers: str, topics: Topics) -> None:
        self.servers = servers
        self.topics = topics
        self._records: dict[type, list[Any]] = defaultdict(list)
        self.last_activity: dict[str, float] = {}  # node -> event time of its last step or heartbeat
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-watch", daemon=True)

    def start(self) -> TopicWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def records(self, kind: type[R]) -> list[R]:
        """A snapshot of every record of this type seen so far."""
        with self._lock:
            return list(self._records.get(kind, ()))

    def wait_for(self, kind: type[R], predicate: Callable[[R], bool], timeout_s: float,
                 alive: Callable[[], bool] = lambda: True) -> R | None:
        """The first record of `kind` satisfying `predicate`, or None after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        seen = 0
        while time.monotonic() < deadline and alive():
            items = self.records(kind)
            for item in items[seen:]:
                if predicate(item):
                    return item
            seen = len(items)
            time.sleep(0.2)
        return None

    def _run(self) -> None:
        consumer = KafkaConsumer(
            bootstrap_servers=self.servers,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            metadata_max_age_ms=2000,
        )
        consumer.subscribe(pattern="^" + self.topics.prefix.replace(".", r"\.") + ".*")
        codec = Codec()
        try:
            while not self._stop.is_set():
                for messages in consumer.poll(timeout_ms=300).values():
                    for msg in messages:
                        try:
                            record = codec.decode(msg.value)
                        except DecodeError:  # not a record: act-state's items and tombstones, say
                            continue
                        with self._lock:
                            self._records[type(record)].append(record)
                        if isinstance(record, (TrainingStep, Heartbeat)):
                            self.last_activity[record.node] = max(self.last_activity.get(record.node, 0.0), record.ts)
        finally:
            consumer.close()
