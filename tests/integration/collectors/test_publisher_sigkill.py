"""SIGKILL the publisher during a broker outage: every record it accepted still arrives.

A real collector process (`publisher_child.py`) publishes two jobs' steps at
50 records/s to a broker of its own, which is stopped mid-run; the process is
then killed with SIGKILL (no `close()`, no flush). The broker comes back and
a new publisher on the same spool directory delivers what was left. Every
record the child reported as accepted must arrive, in order per job (key);
duplicates are allowed only for records the spool marked as handed to the
broker before the kill, and they are counted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from processes import free_port

from trainguard.collectors.publisher import Publisher
from trainguard.lab.localkafka.broker import LocalBroker
from trainguard.schemas.records import TrainingStep
from trainguard.schemas.topics import Topics
from trainguard.settings import BrokerSettings

pytestmark = pytest.mark.broker
CHILD = Path(__file__).parent / "publisher_child.py"


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A broker of this test's own, which it stops and starts."""
    data = tmp_path_factory.mktemp("sigkill-kafka") / "kafka"
    settings = BrokerSettings(port=free_port(), controller_port=free_port(), data_dir=data, heap_mb=256)
    broker = LocalBroker(settings, lib_dir=Path(".trainguard/kafka-lib").resolve())
    broker.start()
    yield broker
    broker.stop()


def accepted_lines(proc: subprocess.Popen[str]) -> list[tuple[str, int]]:
    assert proc.stdout is not None
    out = []
    for line in proc.stdout.read().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "accepted":
            out.append((parts[1], int(parts[2])))
    return out


def test_sigkill_during_outage_loses_no_accepted_record(own_broker: LocalBroker, topic_prefix: str, tmp_path: Path,
                                                        read_back: Callable[..., list[Any]]) -> None:
    servers = own_broker.settings.servers
    spool = tmp_path / "spool"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, str(CHILD), servers, topic_prefix, str(spool), "25"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        time.sleep(4.0)  # delivering normally
        own_broker.stop()
        time.sleep(5.0)  # outage: records go only to the spool
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    accepted = accepted_lines(child)
    assert len(accepted) > 300  # ~50 records/s for ~9 s

    own_broker.start()
    drain = Publisher(servers=servers, topics=Topics(topic_prefix), spool_dir=spool, retry_backoff_s=0.5)
    assert drain.close(timeout_s=60)
    got = [r for r in read_back(servers, [Topics(topic_prefix).name("training")], expect=len(accepted),
                                timeout_s=60) if isinstance(r, TrainingStep)]
    for job in ("ja", "jb"):
        sent = [step for j, step in accepted if j == job]
        arrived = [r.step for r in got if r.job == job]
        firsts = list(dict.fromkeys(arrived))
        assert firsts[:len(sent)] == sent, f"{job}: lost or reordered"
        # order per key: a duplicate may only repeat an earlier record, never jump ahead of one
        assert all(b >= a or b in arrived[:i] for i, (a, b) in enumerate(zip(arrived, arrived[1:]))), job
    duplicates = len(got) - len({(r.job, r.step) for r in got})
    assert duplicates <= drain.stats()["resent"]  # every duplicate is one the publisher counted as possible
