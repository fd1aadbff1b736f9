"""The ETTR simulator: a big job's months of incidents, two recovery policies, no events.

It works on incident arrivals and their costs, not on telemetry: for event-level
recordings that the detectors run on, see `lab.telemetry_sim`.

`simulate(history, params, seed=...)` resamples incident arrivals from a real
fault trace (`arrivals`), prices each incident under trainguard and under a
baseline (`costs`), and accounts ETTR with the breakdown of unproductive
time (`engine`); `report` prints or serialises the outcome. Pure: no I/O
here beyond what the caller passes in. `trainguard ettr-sim` is the CLI.
"""

from trainguard.lab.ettr_sim.arrivals import Arrival, TraceHistory, draw_arrivals
from trainguard.lab.ettr_sim.costs import Loss, baseline_loss, trainguard_loss
from trainguard.lab.ettr_sim.engine import PolicyResult, SimResult, simulate
from trainguard.lab.ettr_sim.params import JobParams, ParamError, SimParams, with_measured_latencies

__all__ = [
    "Arrival",
    "JobParams",
    "Loss",
    "ParamError",
    "PolicyResult",
    "SimParams",
    "SimResult",
    "TraceHistory",
    "baseline_loss",
    "draw_arrivals",
    "simulate",
    "trainguard_loss",
    "with_measured_latencies",
]
