"""The plug-in's own CI: trainguard's conformance suite, imported, plus its one behaviour.

This is what a plug-in author writes: `check_detector` runs every promise the
pipeline relies on (pickling, determinism, bounded state, ...) on the class.
"""

from __future__ import annotations

from sample_detector import LongStepDetector

from trainguard.detectors.checks import check_detector, run
from trainguard.detectors.synthetic import Fleet


def test_conforms_to_the_detector_protocol() -> None:
    check_detector(LongStepDetector)


def test_flags_a_long_step_once_per_rank() -> None:
    fleet = Fleet(nodes=1, gpus=2, tp=1)
    records = fleet.steps(3) + fleet.steps(2, bad={1: {"step_time_s": 90.0}})
    assert len(run(LongStepDetector(limit_s=30.0), records)) == 1
