"""What the console's API tests share: a console over the real broker with two users, and reading its topics.

Not a test module: the console tests import from here, never from one another.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from kafka import KafkaConsumer

from trainguard.schemas.codec import Codec
from trainguard.schemas.records import Record
from trainguard.schemas.signing import Signer
from trainguard.schemas.topics import Topics
from trainguard.streams.admin import ensure_topics
from trainguard.streams.console.app import create_app
from trainguard.streams.console.auth import Authenticator, User
from trainguard.streams.console.feed import ConsoleFeed
from trainguard.streams.console.settings import ConsoleSettings
from trainguard.streams.console.state import ConsoleState

USERS = [User(name="alice", role="operator", token="op"), User(name="victor", role="viewer", token="view")]


OP, VIEW = {"Authorization": "Bearer op"}, {"Authorization": "Bearer view"}


def console_key() -> Signer:
    return Signer("console", Ed25519PrivateKey.generate())


def with_console(kafka: str, prefix: str, body: Callable[[TestClient[Any, Any]], Awaitable[None]],
                 auth: Authenticator | None = None, signer: Signer | None = None, unsigned: bool = False,
                 cfg: ConsoleSettings | None = None) -> None:
    topics = Topics(prefix)
    ensure_topics(kafka, topics.all(), partitions=2, replication=1)

    async def main() -> None:
        feed = ConsoleFeed(kafka, topics, ConsoleState(), signer=None if unsigned else signer or console_key())
        client = TestClient(TestServer(create_app(feed, auth or Authenticator(USERS), cfg or ConsoleSettings())))
        await client.start_server()
        try:
            for _ in range(100):
                if feed.caught_up:
                    break
                await asyncio.sleep(0.1)
            await body(client)
        finally:
            await client.close()

    asyncio.run(main())


def read(kafka: str, name: str, count: int, timeout_s: float = 20.0) -> list[Record]:
    return [Codec().decode(m.value) for m in read_raw(kafka, name, count, timeout_s)]


def read_raw(kafka: str, name: str, count: int, timeout_s: float = 20.0) -> list[Any]:
    consumer = KafkaConsumer(name, bootstrap_servers=kafka, auto_offset_reset="earliest", group_id=None)
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=300).values():
            out.extend(batch)
    consumer.close()
    return out
