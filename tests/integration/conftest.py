"""Helpers for broker tests: run trainguard subcommands as real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer
from processes import stop_all

from trainguard.schemas import Codec, Record
from trainguard.schemas.topics import Topics, key_for


def tg_env(topic_prefix: str, tmp_path: Path) -> dict[str, str]:
    """Environment for a trainguard process bound to this test's topics."""
    env = dict(os.environ)
    env.update(
        {
            "TRAINGUARD_TOPICS__PREFIX": topic_prefix,
            "TRAINGUARD_TOPICS__PARTITIONS": "2",
            "TRAINGUARD_WORKER__APP_ID": f"w-{topic_prefix}",
            "TRAINGUARD_WORKER__STATE_DIR": str(tmp_path / "worker"),
            "TRAINGUARD_ACTIONS__GROUP_ID": f"a-{topic_prefix}",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


@pytest.fixture
def trainguard_proc(kafka: str, topic_prefix: str, tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start `trainguard ARGS...` as a background process; all are killed after the test."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainguard.cli", *args],
            env=tg_env(topic_prefix, tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=tmp_path,
        )
        procs.append(proc)
        return proc

    yield start
    stop_all(procs, timeout_s=15)


def output_of(proc: subprocess.Popen[str]) -> str:
    """Stop a background trainguard process and return what it printed (for failure messages)."""
    if proc.poll() is None:
        proc.terminate()
    try:
        out, _ = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out[-4000:]


@pytest.fixture
def process_output() -> Callable[[subprocess.Popen[str]], str]:
    """`output_of`, for tests that explain a failure with a process's output."""
    return output_of


@pytest.fixture
def publish(kafka: str, topic_prefix: str) -> Iterator[Callable[..., None]]:
    """Publish records (or raw bytes to a logical topic) to this test's topics."""
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    topics, codec = Topics(topic_prefix), Codec()

    def send(*records: Record | tuple[str, bytes]) -> None:
        for item in records:
            if isinstance(item, tuple):
                producer.send(topics.name(item[0]), key=b"raw", value=item[1])
            else:
                producer.send(topics.for_record(item), key=key_for(item), value=codec.encode(item))
        producer.flush()

    yield send
    producer.close()


@pytest.fixture
def read_topic(kafka: str, topic_prefix: str) -> Callable[..., list[Record]]:
    """Read decoded records from a logical topic until `count` arrive or `timeout_s` passes."""

    def read(logical: str, count: int, timeout_s: float = 60.0) -> list[Record]:
        consumer = KafkaConsumer(
            Topics(topic_prefix).name(logical),
            bootstrap_servers=kafka,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        out: list[Record] = []
        deadline = time.monotonic() + timeout_s
        try:
            while len(out) < count and time.monotonic() < deadline:
                for messages in consumer.poll(timeout_ms=500).values():
                    out.extend(Codec().decode(m.value) for m in messages)
        finally:
            consumer.close()
        return out

    return read
