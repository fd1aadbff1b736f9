"""The agent's command feed on the real broker: it says when it listens, and does not stay deaf.

A feed whose group hands it no partition reads nothing and says nothing, so an
agent in that state never obeys a restart. Two feeds in one group on a
one-partition topic make that state for real: the group gives the partition
to one of them and nothing to the other. Each runs in its own thread, as in
two agents: a rebalance waits for every member to rejoin, and one thread
polling both would stall it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from trainguard.collectors.agent.command_feed import BackgroundFeed, KafkaCommandFeed
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import ActionCommand

LOG = "trainguard.collectors.agent.command_feed"


def _topic(servers: str, name: str) -> str:
    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:
        admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])
    finally:
        admin.close()
    return name


def _poll_until(feeds: list[KafkaCommandFeed] | list[BackgroundFeed], done: Callable[[list[str]], bool],
                timeout_s: float = 60.0) -> list[str]:
    """Poll every feed until `done(ids)` holds for the ids of the commands they returned so far."""
    ids: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for feed in feeds:
            ids.extend(received.command.id for received in feed.poll(0.2))
        if done(ids):
            return ids
    raise AssertionError("condition not met in time")


def test_the_first_assignment_is_logged_and_commands_arrive(kafka: str, topic_prefix: str,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    topic = _topic(kafka, f"{topic_prefix}actions")
    feed = KafkaCommandFeed(servers=kafka, topic=topic, group_id=f"{topic_prefix}agent")
    caplog.set_level(logging.INFO, logger=LOG)
    try:
        _poll_until([feed], lambda _: "reading" in caplog.text)
        assert f"command feed: reading {topic} partitions [0] as group {topic_prefix}agent" in caplog.text
        producer = KafkaProducer(bootstrap_servers=kafka)
        producer.send(topic, Codec().encode(ActionCommand(ts=time.time(), id="c1", action="stop", job="j")))
        producer.flush()
        producer.close()
        assert _poll_until([feed], lambda ids: bool(ids)) == ["c1"]
        assert caplog.text.count("command feed: reading") == 1  # once, not per poll
    finally:
        feed.close()


def test_a_feed_left_without_a_partition_says_so_and_reconnects(kafka: str, topic_prefix: str,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    topic = _topic(kafka, f"{topic_prefix}actions")
    group = f"{topic_prefix}agent"
    caplog.set_level(logging.INFO, logger=LOG)
    first, second = (BackgroundFeed(KafkaCommandFeed(servers=kafka, topic=topic, group_id=group, assign_timeout_s=3.0))
                     for _ in range(2))
    try:
        _poll_until([first, second], lambda _: "reconnecting" in caplog.text and "reading" in caplog.text)
        warning = next(r for r in caplog.records if "reconnecting" in r.getMessage())
        assert warning.levelno == logging.WARNING
        assert f"group {group} has no partition of {topic}" in warning.getMessage()
        assert "another agent in the same group?" in warning.getMessage()
        assert f"command feed: reading {topic} partitions [0] as group {group}" in caplog.text  # the other one
    finally:
        first.close()
        second.close()
