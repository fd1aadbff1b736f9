"""What the demo does: the fleet, the faults in order, and the timeouts.

The same `DemoScenario` drives `trainguard demo` (full length) and the e2e
test (shorter): only the numbers change. Detector and safety settings are
scaled to a job whose steps take ~0.2 s on four simulated nodes; they are
written into the run's config file, exactly as a user would configure a
real fleet.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class FaultStep:
    """One injected fault and the incident kind trainguard should report."""

    kind: str  # a lab.demo.faults.FAULT_KINDS entry
    node: str
    expect: str  # incident kind
    title: str
    slow_s: float = 0.0


@dataclass(frozen=True)
class DemoScenario:
    """A fleet, a job, and a fault sequence."""

    job: str = "demo"
    nodes: tuple[str, ...] = ("node-0", "node-1", "node-2", "node-3")
    standbys: tuple[str, ...] = ("spare-0", "spare-1", "spare-2", "spare-3")
    steps: int = 100_000
    extra_steps_after_faults: int = 30
    ckpt_every: int = 15
    compute_s: float = 0.12
    healthy_steps_between: int = 20
    detect_timeout_s: float = 120.0
    recover_timeout_s: float = 180.0
    faults: tuple[FaultStep, ...] = (
        FaultStep("nan", "node-1", "nan", "NaN loss on one rank"),
        FaultStep("hang", "node-2", "hang", "a rank hangs before its all-reduce"),
        FaultStep("slow", "node-3", "slowdown", "a slow node (throttled GPU)", slow_s=0.25),
        FaultStep("bitflip", "node-0", "sdc", "a bit flip in one replica's weights (SDC)"),
        FaultStep("xid79", "node-1", "hw_fault", "XID 79: a GPU fell off the bus"),
        FaultStep("bad_code", "", "user_error", "a hot update with a shape bug (user error)"),
    )
    master_port: int = 29750
    extra_config: dict[str, Any] = field(default_factory=dict)

    def only(self, kinds: list[str]) -> DemoScenario:
        """The same scenario with only these faults, in the order given."""
        by_kind = {f.kind: f for f in self.faults}
        unknown = [k for k in kinds if k not in by_kind]
        if unknown:
            raise ValueError(f"unknown fault kinds {unknown}; known: {', '.join(by_kind)}")
        return dataclasses.replace(self, faults=tuple(by_kind[k] for k in kinds))

    def config(self, state_dir: str) -> dict[str, Any]:
        """The trainguard config for this run (YAML-able)."""
        cfg: dict[str, Any] = {
            "detectors": {
                "instances": [
                    {"type": "nan"},
                    {"type": "loss_spike"},
                    {"type": "sdc"},
                    {"type": "hw_fault"},
                    {"type": "network"},
                    {"type": "user_error", "params": {"cooldown_s": 20.0}},
                    {"type": "hang", "params": {"floor_s": 8.0, "warmup_floor_s": 30.0, "alive_s": 10.0}},
                    {"type": "slowdown", "params": {"recent_s": 8.0, "min_baseline": 20, "localise_wait_s": 8.0,
                                                    # the demo's minutes stand for hours: its throttled GPU
                                                    # persists 20 s, not the fleet default's 120 s
                                                    "accept_s": 3600.0, "persist_s": 20.0}},
                ],
                "correlator": {"window_s": 15.0},
            },
            "actions": {
                # The demo shows act acting: every kind promoted (a new install only observes).
                "rollout": {"default": "auto"},
                "standby_nodes": list(self.standbys),
                "breaker_max_fraction": 0.5,
                "breaker_window_s": 20.0,
                "cooldown_s": 0.0,
                "command_timeout_s": 60.0,
                "state_dir": f"{state_dir}/actions",
                # Every demo "machine" is this host: the fanned-out replay's rank 0 is reached here.
                "selfcheck": {"rendezvous_host": "127.0.0.1", "procs_per_machine": 1},
            },
            "collectors": {"agent": {"grace_s": 3.0, "linger_s": 3600.0, "stack_timeout_s": 5.0,
                                     "hang_suspect_s": 3.0, "hang_stack_every_s": 3.0,
                                     # this interpreter's CLI: `trainguard` need not be on PATH
                                     "selfcheck_command": [sys.executable, "-m", "trainguard.cli", "selfcheck"]}},
        }
        for section, values in self.extra_config.items():
            cfg.setdefault(section, {}).update(values)
        return cfg


def short_scenario() -> DemoScenario:
    """The e2e test's variant: same faults, fewer healthy steps between them."""
    return DemoScenario(healthy_steps_between=12, extra_steps_after_faults=10, ckpt_every=10)
