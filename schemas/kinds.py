"""The incident-kind vocabulary: every kind an anomaly can have, and what each one means downstream.

One table instead of sets scattered over the records, the correlator, the
decision engine, the alert router and the backtest, so adding a kind means
adding one row here (and its name to the `Literal` the records are decoded
with; a unit test holds the two equal):

* `built_in`: a built-in detector of the same name emits it, act decides on
  it, the metrics count it and the backtest scores it (`ANOMALY_KINDS`).
  The others are accepted on the wire but no built-in detector emits them.
* `severity`: what an alert for it says (`critical` for faults that stop
  a job, else `warning`).
* `role`: `cause` kinds explain the symptoms of the same job that follow
  them; a `symptom` (a hang, a slowdown) does not open an incident of its
  own while a cause incident of its job is open (`detectors.correlate`).
* `explains_crash`: an open incident of this kind explains a crash of
  unknown cause of the same job (the causes, and a hang: a hung job's
  ranks die of their timeout).
* `node_local`: one machine's fault; incidents are kept per job *and node*,
  so two GPUs failing on two machines are two evictions.
* `evicting`: the decision for it takes machines out of the job, so the
  backtest counts a wrong node it names as a false eviction.
* `sick_node`: with no job known, it still names a machine to repair; act
  cordons it.
* `noted`: reported and counted, never opened as an incident.
* `blames`: whose history an incident of it counts against when act looks
  for lemon nodes (`actions.lemons`): `every` node it names (a fault of the
  machine itself), the node only when it is the `only` one named (a fabric-wide
  slowdown names many and is none's fault), or `none` (the job's own fault).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

IncidentKind = Literal["hw_fault", "network", "hang", "slowdown", "nan", "loss_spike", "sdc", "user_error"]
OtherKind = Literal[
    "unknown", "transient",  # no detector emits these yet; the action engine retries once, then escalates
    "clock_skew",  # a host's clock off by more than the bound (streams.worker.skew): noted, never an incident
]
AnomalyKind = Literal[IncidentKind, OtherKind]
Severity = Literal["critical", "warning"]
Role = Literal["cause", "symptom", ""]
Blames = Literal["every", "only", "none"]


@dataclass(frozen=True)
class KindSpec:
    """One row of the vocabulary (see the module docstring for each column)."""

    severity: Severity = "warning"
    role: Role = ""
    built_in: bool = False
    explains_crash: bool = False
    node_local: bool = False
    evicting: bool = False
    sick_node: bool = False
    noted: bool = False
    blames: Blames = "none"


# The order is the order every report, metric and tally lists the kinds in.
KINDS: dict[AnomalyKind, KindSpec] = {
    "hw_fault": KindSpec("critical", "cause", built_in=True, explains_crash=True, node_local=True, evicting=True,
                         sick_node=True, blames="every"),
    "network": KindSpec("warning", "cause", built_in=True, explains_crash=True, evicting=True, sick_node=True,
                        blames="only"),
    "hang": KindSpec("critical", "symptom", built_in=True, explains_crash=True, evicting=True),
    "slowdown": KindSpec("warning", "symptom", built_in=True, evicting=True, blames="only"),
    "nan": KindSpec("warning", "cause", built_in=True, explains_crash=True),
    "loss_spike": KindSpec("warning", built_in=True),
    "sdc": KindSpec("critical", "cause", built_in=True, explains_crash=True, evicting=True, sick_node=True,
                    blames="every"),
    "user_error": KindSpec("warning", "cause", built_in=True, explains_crash=True),
    "unknown": KindSpec(),
    "transient": KindSpec(),
    "clock_skew": KindSpec(noted=True),
}

ANOMALY_KINDS: tuple[str, ...] = tuple(k for k, s in KINDS.items() if s.built_in)
SEVERITY: dict[str, Severity] = {k: s.severity for k, s in KINDS.items() if s.built_in}
CAUSES = frozenset(k for k, s in KINDS.items() if s.role == "cause")
SYMPTOMS = frozenset(k for k, s in KINDS.items() if s.role == "symptom")
CRASH_CAUSES = frozenset(k for k, s in KINDS.items() if s.explains_crash)
NODE_LOCAL = frozenset(k for k, s in KINDS.items() if s.node_local)
EVICTING_KINDS = frozenset(k for k, s in KINDS.items() if s.evicting)
SICK_NODE_KINDS = frozenset(k for k, s in KINDS.items() if s.sick_node)
NOTED = frozenset(k for k, s in KINDS.items() if s.noted)
BLAMES_EVERY_NODE: tuple[str, ...] = tuple(k for k, s in KINDS.items() if s.blames == "every")
BLAMES_A_LONE_NODE: tuple[str, ...] = tuple(k for k, s in KINDS.items() if s.blames == "only")
