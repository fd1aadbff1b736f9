"""The local executor's Kafka transport: commands out, agents' results back.

Commands go to `<prefix>actions` keyed by job, so one job's commands stay in
order on one partition. Results are read from `<prefix>action-results` by a
consumer that is positioned at the end *before* the first command is sent,
so a fast agent's answer is never missed; results for other commands that
arrive meanwhile are kept for their own `collect` call. Plans of several
jobs run on threads at once: one reader thread polls the results consumer
and hands each result to the waiting `collect` (a condition per bus, held
only to file a result, never while polling), so no plan thread ever waits
on the broker for another.

Every command is stamped with its issue time and expiry, encoded, and the
encoded bytes signed with act's key (headers `tg-kid`/`tg-sig`). A result
counts only if the node it names signed it, and only if that node is one the
command addressed: a node's correct signature on a command it was never sent
must not fail (or pass) another node's step. Anything else is handed to
`on_reject` (audited by the caller) and ignored.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec

from trainguard.schemas.bounded import Bounded
from trainguard.schemas.codec import Codec, DecodeError
from trainguard.schemas.kafka_config import BrokerSettings
from trainguard.schemas.records import ActionCommand, ActionResult
from trainguard.schemas.signing import KeyRing, Signer, signed_by_node
from trainguard.schemas.topics import Topics
from trainguard.streams import kafka_io


class KafkaCommandBus:
    """`actions.executors.local.CommandBus` over Kafka."""

    def __init__(self, *, broker: BrokerSettings | str, topics: Topics, signer: Signer, node_keys: KeyRing,
                 ttl_s: float, on_reject: Callable[[ActionResult | None, str], None] = lambda result, why: None,
                 codec: Codec | None = None) -> None:
        self.topics = topics
        self.codec = codec or Codec()
        self.signer, self.node_keys, self.ttl_s, self.on_reject = signer, node_keys, ttl_s, on_reject
        settings = kafka_io.as_broker(broker)
        # Reconnect fast after a broker outage (kafka-python backs off up to 30 s by default).
        self._producer = kafka_io.producer(settings, linger_ms=0, reconnect_backoff_max_ms=500)
        self._consumer = kafka_io.consumer(settings, reconnect_backoff_max_ms=500)
        self._cond = threading.Condition()
        self._closing = False
        name = topics.name("action-results")
        parts = kafka_io.partitions_for(self._consumer, name)
        self._consumer.assign(parts)
        self._consumer.seek_to_end(*parts)
        for tp in parts:  # resolve the end offsets now, before any command goes out
            self._consumer.position(tp)
        # Results of commands nobody waits for (another act's, a re-sent command's first answer)
        # would pile up: the oldest are forgotten past the bound.
        self._pending: Bounded[str, list[ActionResult]] = Bounded(10_000)
        self._targets: Bounded[str, frozenset[str]] = Bounded(10_000)  # command id -> the nodes it addressed
        self._reader = threading.Thread(target=self._read, name="act-results-reader", daemon=True)
        self._reader.start()

    def send(self, command: ActionCommand) -> ActionCommand:
        """Stamp issue time and expiry, sign the encoded bytes, publish keyed by job; returns what was sent."""
        now = time.time()
        command = msgspec.structs.replace(command, ts=now, expires=now + self.ttl_s)
        value = self.codec.encode(command)
        with self._cond:
            self._targets[command.id] = frozenset(command.nodes)
        self._producer.send(self.topics.name("actions"), key=command.job.encode(), value=value,
                            headers=self.signer.headers(value))
        self._producer.flush()
        return command

    def collect(self, command_id: str, *, nodes: list[str], timeout_s: float) -> list[ActionResult]:
        """Results for `command_id` until every node answered (or one, if `nodes` is empty)."""
        with self._cond:
            self._cond.wait_for(lambda: self._complete(command_id, nodes), timeout_s)
            got = self._pending.pop(command_id, [])
        if not nodes:
            return got
        strays = [r for r in got if r.node not in nodes]  # filed before this bus knew the command's targets
        for result in strays:
            self.on_reject(result, _not_a_target(result, nodes))
        return [r for r in got if r.node in nodes]

    def _read(self) -> None:
        """The one reader of the results topic: file each result, wake the waiters."""
        while not self._closing:
            try:
                fetched = self._consumer.poll(timeout_ms=100)
            except Exception:  # noqa: BLE001 - a closing consumer or an outage: the next poll tells
                time.sleep(0.1)
                continue
            results = [r for messages in fetched.values() for m in messages
                       if (r := self._verified(m.value, m.headers)) is not None]
            if results:
                with self._cond:
                    strays = [r for r in results if not self._addressed(r)]
                    for result in results:
                        if result not in strays:
                            self._pending[result.command_id] = [*self._pending.get(result.command_id, []), result]
                    self._cond.notify_all()
                for result in strays:
                    self.on_reject(result, _not_a_target(result, self._targets.get(result.command_id, frozenset())))

    def _addressed(self, result: ActionResult) -> bool:
        """Whether `result` comes from a node its command addressed (unknown commands: decided at `collect`)."""
        targets = self._targets.get(result.command_id)
        return targets is None or not targets or result.node in targets

    def _verified(self, value: bytes, headers: Any) -> ActionResult | None:
        """The result, if the node it names signed it; otherwise reject it (None)."""
        try:
            result = self.codec.decode(value, ActionResult)
        except DecodeError:
            return None
        problem = signed_by_node(self.node_keys, value, headers, result.node)
        if problem:
            self.on_reject(result, problem)
            return None
        return result

    def close(self) -> None:
        """Stop the reader and release the Kafka clients."""
        self._closing = True
        self._reader.join(timeout=5)
        self._producer.close()
        self._consumer.close()

    def _complete(self, command_id: str, nodes: list[str]) -> bool:
        """Every node in `nodes` answered (or anyone did, when `nodes` is empty)."""
        got = self._pending.get(command_id, [])
        if not nodes:
            return bool(got)
        return set(nodes) <= {r.node for r in got}


def _not_a_target(result: ActionResult, targets: frozenset[str] | list[str]) -> str:
    return (f"result from {result.node or '?'}, not a target of command {result.command_id} "
            f"(addressed: {', '.join(sorted(targets)) or 'nobody known'})")
