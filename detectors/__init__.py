"""Online fault detectors: pure, event-time, deterministic.

A detector observes records in event-time order and returns anomalies. It
never does I/O and never reads the wall clock, so the same object runs in
the Faust worker, in a backtest and in a unit test. See `detectors.base`.
"""

from trainguard.detectors.base import Detector, anomaly_id

__all__ = ["Detector", "anomaly_id"]
