"""The local executor's Kafka transport: commands out, agents' results back.

Commands go to `<prefix>actions` keyed by job, so one job's commands stay in
order on one partition. Results are read from `<prefix>action-results` by a
consumer that is positioned at the end *before* the first command is sent,
so a fast agent's answer is never missed; results for other commands that
arrive meanwhile are kept for their own `collect` call.

Every command is stamped with its issue time and expiry, encoded, and the
encoded bytes signed with act's key (headers `tg-kid`/`tg-sig`). A result
counts only if the node it names signed it; anything else is handed to
`on_reject` (audited by the caller) and ignored.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from schemas.codec import Codec, DecodeError
from schemas.records import ActionCommand, ActionResult
from schemas.signing import KeyRing, Signer, signed_by_node
from schemas.topics import Topics


class KafkaCommandBus:
    """`actions.executors.local.CommandBus` over Kafka."""

    def __init__(self, *, servers: str, topics: Topics, signer: Signer, node_keys: KeyRing, ttl_s: float,
                 on_reject: Callable[[ActionResult | None, str], None] = lambda result, why: None,
                 codec: Codec | None = None, client_options: dict[str, Any] | None = None) -> None:
        self.topics = topics
        self.codec = codec or Codec()
        self.signer, self.node_keys, self.ttl_s, self.on_reject = signer, node_keys, ttl_s, on_reject
        opts = client_options or {}
        self._producer = KafkaProducer(bootstrap_servers=servers, acks="all", linger_ms=0, **opts)
        self._consumer = KafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False, **opts)
        name = topics.name("action-results")
        parts = [TopicPartition(name, p) for p in sorted(self._partitions(name))]
        self._consumer.assign(parts)
        self._consumer.seek_to_end(*parts)
        for tp in parts:  # resolve the end offsets now, before any command goes out
            self._consumer.position(tp)
        self._pending: dict[str, list[ActionResult]] = {}

    def _partitions(self, name: str, timeout_s: float = 30.0) -> set[int]:
        """Every partition of the results topic. Guessing {0} while metadata is still
        loading would miss every result keyed to another partition."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._consumer.topics()  # refreshes the cluster metadata
            found = self._consumer.partitions_for_topic(name)
            if found:
                return set(found)
            if time.monotonic() >= deadline:
                raise RuntimeError(f"topic {name} has no partitions (was it created?)")
            time.sleep(0.2)

    def send(self, command: ActionCommand) -> ActionCommand:
        """Stamp issue time and expiry, sign the encoded bytes, publish keyed by job; returns what was sent."""
        now = time.time()
        command = msgspec.structs.replace(command, ts=now, expires=now + self.ttl_s)
        value = self.codec.encode(command)
        self._producer.send(self.topics.name("actions"), key=command.job.encode(), value=value,
                            headers=self.signer.headers(value))
        self._producer.flush()
        return command

    def collect(self, command_id: str, *, nodes: list[str], timeout_s: float) -> list[ActionResult]:
        """Results for `command_id` until every node answered (or one, if `nodes` is empty)."""
        deadline = time.monotonic() + timeout_s
        while not self._complete(command_id, nodes) and time.monotonic() < deadline:
            for messages in self._consumer.poll(timeout_ms=200).values():
                for msg in messages:
                    try:
                        result = self.codec.decode(msg.value, ActionResult)
                    except DecodeError:
                        continue
                    problem = signed_by_node(self.node_keys, msg.value, msg.headers, result.node)
                    if problem:
                        self.on_reject(result, problem)
                        continue
                    self._pending.setdefault(result.command_id, []).append(result)
        return self._pending.pop(command_id, [])

    def close(self) -> None:
        """Release the Kafka clients."""
        self._producer.close()
        self._consumer.close()

    def _complete(self, command_id: str, nodes: list[str]) -> bool:
        got = self._pending.get(command_id, [])
        if not nodes:
            return bool(got)
        return set(nodes) <= {r.node for r in got}
