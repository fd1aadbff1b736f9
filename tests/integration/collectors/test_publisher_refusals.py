"""A record the broker refuses is set aside; every valid record around it arrives (issue 21, real broker).

Before, a refused record was resent for ever at the head of the spool, so
nothing after it was delivered (and kafka-python 3.0.12 was seen failing
later sends silently on the producer that sent it). Two refusals are tried:
by the client (a record over the producer's 1 MiB request limit) and by the
broker (a record over the topic's `max.message.bytes`, which fails its
whole batch, valid batch-mates included).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainguard.collectors.publisher import Publisher
from trainguard.schemas.records import LogEvent, TrainingStep
from trainguard.schemas.topics import Topics
from trainguard.streams.admin import ensure_topics

pytestmark = pytest.mark.broker


def _step(i: int) -> TrainingStep:
    return TrainingStep(ts=1.7e9 + i, job="j1", rank=0, node="n0", step=i, loss=1.0)


def _log(i: int, size: int = 10) -> LogEvent:
    text = base64.b64encode(os.urandom(size)).decode()[:size]  # random: gzip cannot shrink it under a limit
    return LogEvent(ts=1.7e9 + i, node="n0", level="ERROR", source="python", message=f"{i}:{text}", job="j1")


def _first(records: list[Any], kind: type) -> list[int]:
    seen: list[int] = []
    for r in records:
        n = r.step if isinstance(r, TrainingStep) else int(r.message.split(":")[0])
        if isinstance(r, kind) and n not in seen:
            seen.append(n)
    return seen


def _publish(pub: Publisher, n: int, oversized_at: set[int], size: int) -> None:
    for i in range(n):
        pub.publish(_step(i))
        pub.publish(_log(i, size if i in oversized_at else 10))


@pytest.mark.parametrize("where", ["client", "broker"])
def test_a_refused_record_is_set_aside_and_every_valid_one_arrives(
        where: str, kafka: str, topic_prefix: str, tmp_path: Path, read_back: Callable[..., list[Any]]) -> None:
    topics = Topics(topic_prefix)
    if where == "broker":  # the topic takes less than the producer would send: the broker refuses the batch
        ensure_topics(kafka, [topics.name("training"), topics.name("logs")], partitions=1, replication=1,
                      configs={topics.name("logs"): {"max.message.bytes": "65536"}})
        size = 300_000
    else:
        size = 2_000_000  # over the producer's max_request_size: refused before it is sent
    pub = Publisher(servers=kafka, topics=topics, spool_dir=tmp_path / "spool", send_timeout_s=10.0)
    bad = {40, 41, 150}
    _publish(pub, 200, bad, size)
    assert pub.flush(timeout_s=90), pub.stats()
    stats = pub.stats()
    assert stats["refused"] == len(bad) and stats["spooled"] == 0, stats
    refused = pub.spool.refused_entries()
    assert [int(r.head.split(b'"message":"')[1].split(b":")[0]) for r in refused] == sorted(bad)
    assert all("MessageSizeTooLarge" in r.reason and r.size > size for r in refused), refused
    # and the producer still works for what comes after
    for i in range(200, 260):
        pub.publish(_step(i))
        pub.publish(_log(i))
    assert pub.close(timeout_s=60), pub.stats()
    got = read_back(kafka, [topics.name("training"), topics.name("logs")], expect=520 - len(bad), timeout_s=60)
    assert _first(got, TrainingStep) == list(range(260))
    assert _first(got, LogEvent) == [i for i in range(260) if i not in bad]
