"""The agent's Kafka edge for commands: `ActionCommand`s from the `<prefix>actions` topic.

Each agent reads with its own consumer group (`trainguard-agent-<job>-<node>`),
so every agent sees every command of its job (a shared group would hand a
command to only one of them) and resumes from its committed offset after a
restart. A payload that does not decode is logged and skipped: it stays in
the topic, where the worker's dead-letter handling sees it too. Each command
is handed over with its exact bytes and headers: the agent verifies the
detached signature over those bytes, never over a re-encoding.

The consumer is created lazily and re-created after a failure: training
must start and keep running even while the broker is unreachable. It is also
re-created when it has held no partition of the topic for `assign_timeout_s`
(never assigned, or left empty by a rebalance): an agent that silently reads
nothing never obeys a restart. The demo once lost a spare's restart with
nothing in that agent's log to tell a deaf feed from a lost command, so every
new assignment is logged: an agent's log says when it started listening.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from kafka import KafkaConsumer
from kafka.errors import KafkaError

from trainguard.schemas.codec import Codec, DecodeError
from trainguard.schemas.records import ActionCommand
from trainguard.schemas.signing import Received

log = logging.getLogger(__name__)


class KafkaCommandFeed:
    """Polls action commands; offsets are committed only after the agent handled them."""

    def __init__(self, *, servers: str, topic: str, group_id: str,
                 client_options: dict[str, Any] | None = None, assign_timeout_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._config = dict(bootstrap_servers=servers, group_id=group_id, enable_auto_commit=False,
                            auto_offset_reset="earliest", client_id=group_id,
                            bootstrap_timeout_ms=5000,  # retried by the caller; keeps close() prompt
                            **(client_options or {}))
        self.topic = topic
        self._consumer: KafkaConsumer | None = None
        self._codec = Codec()
        self._dirty = False
        self.group_id = group_id
        self.assign_timeout_s = assign_timeout_s
        self._clock = clock
        self._unassigned_since: float | None = None  # since when the consumer has held no partition
        self._partitions: list[int] = []  # the assignment last logged

    def poll(self, timeout_s: float) -> list[Received]:
        """Commands that arrived (possibly none) within `timeout_s`, with their bytes and headers."""
        try:
            if self._consumer is None:
                self._consumer = KafkaConsumer(self.topic, **self._config)
                self._unassigned_since, self._partitions = self._clock(), []
            batches = self._consumer.poll(timeout_ms=int(timeout_s * 1000))
            self._watch_assignment(self._consumer)
        except KafkaError as exc:
            log.warning("command feed: broker unreachable (%s); retrying", exc)
            self.close()
            time.sleep(timeout_s)
            return []
        out: list[Received] = []
        for batch in batches.values():
            for message in batch:
                self._dirty = True
                try:
                    cmd = self._codec.decode(message.value, expect=ActionCommand)
                    out.append(Received(cmd, message.value, list(message.headers or [])))
                except DecodeError as exc:
                    log.warning("skipping undecodable command at %s[%d]@%d: %s", message.topic,
                                message.partition, message.offset, exc)
        return out

    def _watch_assignment(self, consumer: KafkaConsumer) -> None:
        """Log each new assignment; drop a consumer left without a partition for `assign_timeout_s`."""
        partitions = sorted(tp.partition for tp in consumer.assignment())
        if partitions:
            self._unassigned_since = None
            if partitions != self._partitions:
                self._partitions = partitions
                log.info("command feed: reading %s partitions %s as group %s", self.topic, partitions, self.group_id)
            return
        now = self._clock()
        if self._unassigned_since is None:
            self._unassigned_since = now
        elif now - self._unassigned_since >= self.assign_timeout_s:
            log.warning("command feed: group %s has no partition of %s after %.0f s (another agent in the same "
                        "group?); reconnecting", self.group_id, self.topic, now - self._unassigned_since)
            self.close()

    def commit(self) -> None:
        """Commit what was polled (after it was handled)."""
        if self._dirty and self._consumer is not None:
            try:
                self._consumer.commit()
            except KafkaError as exc:  # redelivery is harmless: the agent de-duplicates by id
                log.warning("command feed: commit failed (%s)", exc)
            self._dirty = False

    def close(self) -> None:
        """Leave the group."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


class BackgroundFeed:
    """Runs a `KafkaCommandFeed` in its own thread, so a slow or absent broker never blocks the agent.

    The agent's loop must keep supervising the training process (exit codes,
    hang watch) whatever Kafka does; connecting alone can take 30 s. The
    thread hands over one polled batch at a time and commits its offsets
    only after the agent called `commit()` for it, i.e. after handling it.
    """

    def __init__(self, feed: KafkaCommandFeed) -> None:
        self._feed = feed
        self._batches: queue.Queue[list[Received]] = queue.Queue(maxsize=1)
        self._handled = threading.Event()
        self._outstanding = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainguard-command-feed", daemon=True)
        self._thread.start()

    def poll(self, timeout_s: float) -> list[Received]:
        """The next batch of commands, or [] after `timeout_s`."""
        try:
            batch = self._batches.get(timeout=timeout_s)
        except queue.Empty:
            return []
        self._outstanding = True
        return batch

    def commit(self) -> None:
        """The last batch was handled: let the feed thread commit it and poll again."""
        if self._outstanding:
            self._outstanding = False
            self._handled.set()

    def close(self) -> None:
        """Stop the thread and leave the group."""
        self._stop.set()
        self._handled.set()
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._feed.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            batch = self._feed.poll(0.5)
            if batch:
                self._batches.put(batch)
                self._handled.wait()
                self._handled.clear()
            self._feed.commit()  # also commits skipped undecodable messages
