"""`bench_pipeline --compare-clients` against the real broker: both clients feed the worker's hot path the whole backlog.

It asserts what the comparison rests on (every event handled once by each
client, the same outputs from both, the ratio printed), not how fast either
is: figures come from benchmark runs, never from timed assertions.
"""

from __future__ import annotations

import pytest

from benchmarks import client_compare, fleet_mix


def test_both_clients_feed_every_event_once_to_the_hot_path_and_agree_on_its_outputs(
        kafka: str, capsys: pytest.CaptureFixture[str]) -> None:
    backlog = fleet_mix.load_backlog(kafka, nodes=16, count=3_000, rdma=True, job_nodes=8)
    runs = client_compare.compare_clients(kafka, backlog)
    assert [r.client.split()[0] for r in runs] == ["aiokafka", "confluent-kafka"]  # make installs the bench extra
    assert all(r.events == backlog.events for r in runs)  # each event once: none missed, none counted per task
    assert runs[0].outputs == runs[1].outputs > 0  # the node->job updates of a fresh task, whichever client read
    assert all(r.per_cpu_s > 0 for r in runs)
    client_compare.print_clients(runs)
    client_compare.print_client_rounds([runs, runs])
    out = capsys.readouterr().out
    assert "librdkafka / aiokafka: " in out and "us per event saved" in out
    ratio = runs[1].per_cpu_s / runs[0].per_cpu_s
    assert f"median {ratio:.2f}x (range {ratio:.2f} - {ratio:.2f}x, 2 rounds)" in out
