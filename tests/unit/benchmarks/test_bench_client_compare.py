"""`benchmarks.client_compare`'s adapter and grouping: librdkafka's messages as the worker's processor reads them."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from benchmarks.client_compare import Processed, _grouped, _Message, print_client_rounds, print_clients


@dataclass
class _Ck:
    """A confluent_kafka.Message's accessors (methods, timestamp as (type, ms)), as `consume` returns them."""

    t: str
    p: int
    o: int
    err: object = None

    def error(self) -> object: return self.err
    def topic(self) -> str: return self.t
    def partition(self) -> int: return self.p
    def offset(self) -> int: return self.o
    def value(self) -> bytes: return b"v%d" % self.o
    def key(self) -> bytes: return b"k"
    def timestamp(self) -> tuple[int, int]: return (1, 1_000 + self.o)


def test_a_batch_is_grouped_per_partition_in_order_with_errors_left_out() -> None:
    parts: dict = {}
    fetched = _grouped([_Ck("a", 0, 5), _Ck("b", 1, 7), _Ck("a", 0, 6), _Ck("a", 0, 8, err="EOF")], parts)
    assert {(tp.topic, tp.partition): [m.offset for m in ms] for tp, ms in fetched.items()} == {
        ("a", 0): [5, 6], ("b", 1): [7]}
    again = _grouped([_Ck("a", 0, 9)], parts)
    assert next(iter(again)) is next(iter(fetched))  # one TopicPartition per partition, reused across batches


def test_the_adapter_reads_as_the_processor_expects() -> None:
    m = _Message(("gpu", b"{}", b"n1", 3, 42, 1_700_000_000_123))
    assert (m.topic, m.value, m.key, m.partition, m.offset, m.timestamp) == (
        "gpu", b"{}", b"n1", 3, 42, 1_700_000_000_123)


def test_without_confluent_kafka_the_comparison_says_how_to_install_it(capsys: pytest.CaptureFixture[str]) -> None:
    print_clients([Processed("aiokafka (the worker's client)", 100, 0.5, 0)])
    print_client_rounds([[Processed("aiokafka", 100, 0.5, 0)]])
    out = capsys.readouterr().out
    assert "200" in out and "pip install 'trainguard[bench]'" in out and "librdkafka / aiokafka" not in out


def test_the_ratio_is_taken_within_each_round(capsys: pytest.CaptureFixture[str]) -> None:
    slow, fast = Processed("aiokafka", 1_000, 1.0, 0), Processed("confluent-kafka", 1_000, 0.5, 0)
    print_client_rounds([[slow, fast], [fast, fast], [slow, slow]])
    assert "median 1.00x (range 1.00 - 2.00x, 3 rounds)" in capsys.readouterr().out


def test_the_worker_is_quoted_against_its_own_hot_path(capsys: pytest.CaptureFixture[str]) -> None:
    print_clients([Processed("aiokafka", 1_000, 0.01, 0), Processed("confluent-kafka", 1_000, 0.008, 0)], 80_000.0)
    assert "the worker, exactly-once, is 0.80x its hot path behind aiokafka" in capsys.readouterr().out
