"""Rank 0's early-stop call, against a real torch TCP store in this process.

Each "rank" here is a `go_on` call with that rank's record; the world's
other ranks are simulated by putting their records in the store first.
"""

from __future__ import annotations

import datetime
import threading
import time
from typing import Any

import torch.distributed as dist

from trainguard.collectors.agent.selfcheck.referee import go_on

MACHINES = ["a", "b", "c"]


def store(prefix: str) -> Any:
    server = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=5), wait_for_workers=False)
    return dist.PrefixStore(prefix, server), server  # the server must outlive the test's calls


def posted(s: Any, stage: str, rank: int, machine: str, status: str = "ok") -> None:
    s.set(f"rec/{stage}/{rank}", f'{{"rank": {rank}, "machine": "{machine}", "status": "{status}"}}')
    s.add(f"count/{stage}", 1)


def call(s: Any, rank: int, machine: str, status: str = "ok", world: int = 3) -> list[str]:
    return go_on(s, stage="all_to_all", rank=rank, world=world, machines=MACHINES[:world], ppn=1, timeout_s=0.2,
                 record={"rank": rank, "machine": machine, "status": status})


def test_a_named_machine_stops_every_rank() -> None:
    s, _server = store("stop")
    posted(s, "all_to_all", 1, "b", "failed")
    posted(s, "all_to_all", 2, "c")
    assert call(s, 0, "a") == ["b"]  # the referee names b: stop
    assert call(s, 2, "c") == ["b"]  # and the others hear it


def test_a_healthy_stage_goes_on() -> None:
    s, _server = store("go")
    posted(s, "all_to_all", 1, "b")
    posted(s, "all_to_all", 2, "c")
    assert call(s, 0, "a") == [] and call(s, 1, "b") == []


def test_a_rank_gone_quiet_is_judged_after_the_window() -> None:
    s, _server = store("quiet")
    posted(s, "all_to_all", 1, "b")  # c's rank never posts (hung in the stage)
    started = time.monotonic()
    assert call(s, 0, "a") == ["c"]
    assert 0.25 < time.monotonic() - started < 3.0  # waited 1.5 timeouts of quiet, not forever


def test_without_a_referee_the_ranks_carry_on() -> None:
    s, _server = store("silent")  # rank 0 is the hung one: no word ever comes
    started = time.monotonic()
    assert call(s, 1, "b") == []
    assert time.monotonic() - started < 3.0


def test_a_referee_that_finished_the_stage_late_is_still_heard() -> None:
    """Rank 0 began gathering but decides after the others' first window: they wait one window more
    rather than run the next stage (on a loaded host a healthy machine once did, after n2 was named)."""
    s, server = store("late")
    referee = dist.PrefixStore("late", dist.TCPStore("127.0.0.1", server.port, 1, False,
                                                     timeout=datetime.timedelta(seconds=5)))  # rank 0's own client
    referee.set("gathering/all_to_all", "1")  # rank 0 finished the stage and is gathering
    posted(s, "all_to_all", 2, "c")
    started = time.monotonic()
    timer = threading.Timer(1.0, lambda: referee.set("decision/all_to_all", '["b"]'))  # after the first 0.7 s window
    timer.start()
    try:
        assert call(s, 2, "c") == ["b"]
    finally:
        timer.cancel()
    assert 0.9 < time.monotonic() - started < 3.0
