"""The demo scenario, shortened, as a test: a real job survives six faults.

Real parts throughout: the local Kafka broker, the Faust worker, the action
consumer with the local executor, `trainguard run` agents supervising real
torch.distributed (gloo, CPU) ranks. GPU telemetry is simulated (no GPU
here): the XID 79 arrives as an NVML sample would.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from rich.console import Console

from trainguard.lab.demo.console import ConsoleReporter
from trainguard.lab.demo.runner import DemoRunner
from trainguard.lab.demo.scenario import short_scenario
from trainguard.settings import load_settings

NODE_SCOPED = {"hang", "slow", "bitflip", "xid79", "nan"}


@pytest.mark.timeout(1200)  # six restarts of four torch processes on two cores
def test_job_survives_every_injected_fault(kafka: str, tmp_path: Path) -> None:
    scenario = short_scenario()
    console = Console(record=True, width=120)
    outcome = DemoRunner(scenario, load_settings(), tmp_path / "run", ConsoleReporter(console)).run()
    story = console.export_text()

    assert [f.step.kind for f in outcome.faults] == [f.kind for f in scenario.faults], story
    for fault in outcome.faults:
        assert fault.incident is not None, f"{fault.step.title} not detected\n{story}"
        assert fault.incident.kind == fault.step.expect, story
        if fault.step.kind in NODE_SCOPED:
            named = set(fault.incident.nodes)
            if fault.decision is not None:
                named |= {n for p in fault.decision.plan for n in p.nodes}
            assert fault.step.node in named, f"{fault.step.title}: localised to {named}\n{story}"
        assert fault.decision is not None, story
        assert fault.recovered_at is not None, f"{fault.step.title}: training did not resume\n{story}"
        if fault.step.kind == "nan":  # every-step checkpoints: back to the step just before the NaN
            assert fault.onset_step is not None and fault.resumed_from is not None, story
            assert fault.resumed_from >= fault.onset_step, story
            assert fault.restored_tiers, f"no rank announced the tier it restored from\n{story}"

    assert outcome.target_step is not None and outcome.final_step is not None
    assert outcome.final_step >= outcome.target_step, story
    assert outcome.final_loss is not None and math.isfinite(outcome.final_loss), story
