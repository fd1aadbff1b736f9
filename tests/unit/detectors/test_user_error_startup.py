"""user_error: a whole job dying silently at start-up is its own code; one node, or an infra line, is not."""

from __future__ import annotations

from trainguard.collectors.agent.error_file import SILENT_STARTUP
from trainguard.detectors.logs import UserErrorDetector
from trainguard.schemas.records import LogEvent


def silent_exit(node: str, ts: float, code: int = 1, job: str = "j") -> LogEvent:
    return LogEvent(ts=ts, node=node, level="error", source="training", category="exit", exit_code=code, job=job,
                    message=f"process exited with code {code} {SILENT_STARTUP}")


def test_every_node_dying_silently_at_start_up_is_a_user_error() -> None:
    det = UserErrorDetector()
    assert det.observe(silent_exit("n0", 10.0)) == []  # one node: could be its machine
    [found] = det.observe(silent_exit("n1", 12.0))
    assert (found.kind, found.nodes, found.evidence["exit_code"]) == ("user_error", ["n0", "n1"], 1)
    assert "start-up on 2 nodes" in found.evidence["match"]


def test_an_infra_line_or_a_different_code_or_a_late_second_node_is_not() -> None:
    det = UserErrorDetector()
    det.observe(LogEvent(ts=9.0, node="n2", level="error", source="training", job="j",
                         message="RuntimeError: NCCL error: unhandled system error, Connection reset by peer"))
    det.observe(silent_exit("n0", 10.0))
    assert det.observe(silent_exit("n1", 11.0)) == []  # a machine or the network was failing meanwhile
    det = UserErrorDetector()
    det.observe(silent_exit("n0", 10.0, code=1))
    assert det.observe(silent_exit("n1", 11.0, code=-9)) == []  # killed by a signal: not the same death
    det = UserErrorDetector()
    det.observe(silent_exit("n0", 10.0))
    assert det.observe(silent_exit("n1", 500.0)) == []  # minutes apart: two separate failures


def test_a_plain_exit_code_one_with_no_marker_stays_unknown() -> None:
    det = UserErrorDetector()
    plain = [LogEvent(ts=10.0 + i, node=f"n{i}", level="error", source="training", category="exit", exit_code=1,
                      job="j", message="process exited with code 1") for i in range(4)]
    assert [a for e in plain for a in det.observe(e)] == []
