"""`bench_pipeline`'s floors against the real broker: each reads the whole backlog, nothing more, and says so.

It asserts what the harness reports (every event read once, a rate for each
floor, the worker's ratio printed against each), not how fast anything is:
figures come from benchmark runs, never from timed assertions.
"""

from __future__ import annotations

import asyncio

import pytest

from benchmarks import fleet_mix, pipeline_floors
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import NodeGpuSample, RdmaSample
from trainguard.schemas.topics import Topics


def test_every_floor_reads_the_whole_backlog_and_is_printed_next_to_the_worker(
        kafka: str, capsys: pytest.CaptureFixture[str]) -> None:
    backlog = fleet_mix.load_backlog(kafka, nodes=16, count=3_000)
    assert backlog.events >= 3_000
    rate, values = asyncio.run(pipeline_floors._aiokafka_read(kafka, backlog, keep=True))
    assert len(values) == backlog.events  # every event once: no partition missed, none read twice
    floors = pipeline_floors.measure_floors(kafka, backlog)
    assert set(floors) == {"decode only", "confluent-kafka + decode", "aiokafka + decode"}
    assert all(r is not None and r > 0 for r in floors.values())  # make installs the bench extra
    pipeline_floors.print_side_by_side(backlog, 16, floors, 1_000.0)
    out = capsys.readouterr().out
    assert f"one backlog of {backlog.events:,} events" in out and "load average" in out
    assert out.count("the worker is") == 3 and "worker, exactly-once" in out


def test_a_floor_without_confluent_kafka_says_how_to_install_it(capsys: pytest.CaptureFixture[str]) -> None:
    backlog = fleet_mix.Backlog("x.", 10, Topics("x."), 1)
    pipeline_floors.print_side_by_side(backlog, 1, {"confluent-kafka + decode": None, "decode only": 5.0}, 1.0)
    assert "pip install 'trainguard[bench]'" in capsys.readouterr().out


def test_a_backlog_with_rdma_and_several_jobs_lies_on_its_three_topics_and_is_read_whole(kafka: str) -> None:
    backlog = fleet_mix.load_backlog(kafka, nodes=16, count=3_000, rdma=True, job_nodes=4)
    assert backlog.names[-1].endswith("rdma")  # the floors and the drain's progress read the RDMA topic too
    _rate, values = asyncio.run(pipeline_floors._aiokafka_read(kafka, backlog, keep=True))
    assert len(values) == backlog.events
    records = [Codec().decode(v) for v in values]
    assert sum(isinstance(r, RdmaSample) for r in records) == sum(isinstance(r, NodeGpuSample) for r in records) > 0
    assert {r.job for r in records} == {f"bench-{i:03d}" for i in range(4)}  # 16 nodes in jobs of at most 4

