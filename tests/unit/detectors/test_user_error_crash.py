"""No silent crash (issue 22): ranks that stop with no recognised cause are an incident all the same.

The rule waits `crash_grace_s` of event time after the first non-zero exit
for a cause (a traceback, a silent start-up, application XIDs of this
detector; hardware, network, NaN or hang incidents of the others, which the
correlator then absorbs the crash into). Exit 0 is training finishing, and
an exit act commanded (or a SIGTERM a scheduler sends) is no crash.
"""

from __future__ import annotations

from trainguard.collectors.agent.error_file import COMMANDED
from trainguard.detectors.checks import check_detector, feed
from trainguard.detectors.correlate import IncidentCorrelator
from trainguard.detectors.logs import UserErrorDetector
from trainguard.schemas.records import Anomaly, Heartbeat, LogEvent

NODES = ("n0", "n1", "n2", "n3")


def exit_(node: str, ts: float, code: int, job: str = "j", message: str = "") -> LogEvent:
    return LogEvent(ts=ts, node=node, level="info" if code == 0 else "error", source="training", category="exit",
                    exit_code=code, job=job, message=message or f"process exited with code {code}")


def clock(ts: float, job: str = "j") -> Heartbeat:
    """Any later record moves event time on (the pipeline ticks with it)."""
    return Heartbeat(ts=ts, job=job, rank=0, node="n0", pid=1, step=1, phase="training")


def test_a_whole_job_exiting_with_code_1_and_no_message_is_an_incident() -> None:
    found = feed(UserErrorDetector(), [*(exit_(n, 100.0 + i, 1) for i, n in enumerate(NODES)), clock(140.0)])
    [crash] = found
    assert (crash.kind, crash.job, crash.nodes, crash.onset) == ("user_error", "j", list(NODES), 100.0)
    assert crash.evidence["cause"] == "unknown" and crash.evidence["pending_diagnosis"] is True
    assert crash.ts >= 130.0  # reported only once the grace for a known cause has run out


def test_one_node_killed_by_the_oom_killer_with_no_message_is_an_incident_naming_that_node() -> None:
    found = feed(UserErrorDetector(), [exit_("n2", 50.0, -9), clock(60.0), clock(81.0)])
    [crash] = found
    assert (crash.nodes, crash.evidence["exit_codes"], crash.evidence["cause"]) == (["n2"], {"n2": -9}, "unknown")


def test_the_crash_is_not_reported_before_its_grace_runs_out() -> None:
    det = UserErrorDetector(crash_grace_s=30.0)
    assert feed(det, [exit_("n0", 10.0, 137), clock(39.9)]) == []
    assert [a.evidence["exit_code"] for a in feed(det, [clock(40.0)])] == [137]


def test_training_that_finished_with_exit_0_everywhere_is_not() -> None:
    assert feed(UserErrorDetector(), [*(exit_(n, 100.0, 0) for n in NODES), clock(1000.0)]) == []


def test_a_crash_already_explained_as_user_error_raises_no_second_incident() -> None:
    traceback = LogEvent(ts=100.0, node="n0", level="error", source="stderr", category="traceback", exit_code=1,
                         job="j", message="Traceback (most recent call last):\nImportError: cannot import name 'x'")
    found = feed(UserErrorDetector(), [traceback, *(exit_(n, 100.5, 1) for n in NODES), clock(200.0)])
    assert [a.evidence.get("cause") for a in found] == [None]  # the ImportError, once; no crash "of unknown cause"


def test_a_stop_commanded_by_act_is_not_a_crash() -> None:
    marked = [exit_(n, 100.0, -15 if i else -9, message=f"process exited with code -9 ({COMMANDED} restart)")
              for i, n in enumerate(NODES)]
    assert feed(UserErrorDetector(), [*marked, clock(1000.0)]) == []
    # ...nor are the other ranks of that job dying of it moments later, with no marker of their own
    assert feed(UserErrorDetector(), [marked[0], exit_("n1", 101.0, 1), clock(1000.0)]) == []


def test_a_sigterm_from_a_scheduler_is_an_orderly_stop_not_a_crash() -> None:
    assert feed(UserErrorDetector(), [exit_("n0", 10.0, -15), exit_("n1", 10.0, 143), clock(500.0)]) == []


def test_a_crash_act_stops_the_job_for_within_the_grace_is_left_to_that_incident() -> None:
    """A node crashes, act (acting on another detector's incident) restarts the job: already handled."""
    marked = exit_("n1", 105.0, -15, message=f"process exited with code -15 ({COMMANDED} restart)")
    assert feed(UserErrorDetector(), [exit_("n0", 100.0, 1), marked, clock(1000.0)]) == []


def test_a_crash_after_the_commanded_restart_has_settled_is_a_new_incident() -> None:
    marked = exit_("n0", 100.0, -15, message=f"process exited with code -15 ({COMMANDED} restart)")
    found = feed(UserErrorDetector(), [marked, exit_("n0", 400.0, 1), clock(500.0)])
    assert [(a.onset, a.evidence["cause"]) for a in found] == [(400.0, "unknown")]


def test_two_jobs_crashing_are_two_incidents_each_naming_its_own_nodes() -> None:
    found = feed(UserErrorDetector(), [exit_("a0", 10.0, 1, job="a"), exit_("b3", 12.0, -11, job="b"), clock(60.0)])
    assert sorted((a.job, tuple(a.nodes)) for a in found) == [("a", ("a0",)), ("b", ("b3",))]


def test_ranks_of_one_crash_exiting_seconds_apart_are_one_incident() -> None:
    exits = [exit_(n, 10.0 + 7.0 * i, 1) for i, n in enumerate(NODES)]  # within the grace of the first
    [crash] = feed(UserErrorDetector(), [*exits, clock(200.0)])
    assert crash.nodes == list(NODES)


def test_a_job_crashing_again_after_its_restart_is_a_second_incident_not_muted_by_a_cooldown() -> None:
    """The second one is what lets the engine escalate after its one retry: a crash loop is never silent."""
    found = feed(UserErrorDetector(), [exit_("n0", 10.0, 1), clock(45.0), exit_("n0", 80.0, 1), clock(200.0)])
    assert [a.onset for a in found] == [10.0, 80.0]


def test_a_crash_explained_by_an_open_hardware_incident_is_absorbed_by_the_correlator() -> None:
    correlator = IncidentCorrelator(window_s=300.0)
    hw = Anomaly(ts=101.0, id="hw", kind="hw_fault", detector="hardware", onset=100.0, job="j", nodes=["n2"])
    [opened] = correlator.add(hw)
    [crash] = feed(UserErrorDetector(), [exit_("n2", 103.0, 1), clock(140.0)])
    assert correlator.add(crash) == []
    assert [i.anomaly_ids for i in correlator.open_incidents()] == [["hw", crash.id]]
    assert opened.kind == "hw_fault"


def test_a_crash_with_no_open_cause_opens_its_own_incident() -> None:
    correlator = IncidentCorrelator(window_s=300.0)
    slow = Anomaly(ts=90.0, id="s", kind="slowdown", detector="slowdown", onset=80.0, job="other", nodes=["x"])
    correlator.add(slow)
    [crash] = feed(UserErrorDetector(), [exit_("n2", 103.0, 1), clock(140.0)])
    [incident] = correlator.add(crash)
    assert (incident.kind, incident.evidence["cause"]) == ("user_error", "unknown")


def test_the_detector_still_passes_the_conformance_suite_on_a_stream_with_crashes() -> None:
    from trainguard.detectors.synthetic import mixed_stream

    stream = mixed_stream()
    t0 = stream[len(stream) // 3].ts
    crashes = [exit_("n1", t0, 1, job="crash-job"), exit_("n2", t0 + 1.0, -9, job="crash-job")]
    merged = sorted([*stream, *crashes], key=lambda r: r.ts)
    assert any(a.evidence.get("cause") == "unknown" for a in feed(UserErrorDetector(), merged))
    check_detector(UserErrorDetector, merged)
