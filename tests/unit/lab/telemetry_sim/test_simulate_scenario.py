"""Scenario files: validation with one-line errors naming the key, and the shipped scenario sets."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.lab.telemetry_sim.scenario import ScenarioError, load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[4]


def test_defaults_fill_a_minimal_scenario() -> None:
    sc = parse_scenario({"name": "m", "duration_s": 60})
    assert (sc.job.nodes, sc.job.gpus_per_node, sc.job.tp) == (4, 8, 8)
    assert sc.faults == [] and sc.faults_from_trace is None


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"name": "x", "duration_s": 60, "faults": [{"kind": "hangg", "at_s": 1}]}, "faults.0.kind"),
        ({"name": "x", "duration_s": -1}, "duration_s"),
        ({"name": "x", "duration_s": 60, "job": {"nodes": 0}}, "job.nodes"),
        ({"name": "x", "duration_s": 60, "job": {"nodez": 3}}, "job.nodez"),
        ({"name": "x", "duration_s": 60, "faults": [{"kind": "hang", "at_s": 1, "variant": "x"}]}, "faults.0"),
        ({"name": "x", "duration_s": 60, "faults": [{"kind": "nan", "at_s": 99}]}, "faults.0.at_s"),
        ({"name": "x", "duration_s": 60, "faults": [{"kind": "nan", "at_s": 9, "node": 7}]}, "faults.0.node"),
        ({"name": "x", "duration_s": 60, "job": {"nodes": 3, "tp": 16}}, "job"),
        ({"name": "x", "duration_s": 60, "job": {"nodes": 1, "tp": 8}, "faults": [{"kind": "sdc", "at_s": 1}]},
         "faults.0.kind"),
    ],
)
def test_bad_values_give_one_line_naming_the_key(data: dict[str, object], key: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data, "s.yaml")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"s.yaml: {key}"), message


def test_missing_file_and_bad_yaml_are_reported(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="not found"):
        load_scenario(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError, match="invalid YAML"):
        load_scenario(bad)


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios").glob("*/*.yaml")), ids=lambda p: p.name)
def test_every_shipped_scenario_is_valid(path: Path) -> None:
    assert load_scenario(path).duration_s > 0


def test_tuning_and_evaluation_sets_are_disjoint() -> None:
    """Evaluation figures only mean something on scenarios nobody tuned on."""
    tuning = {load_scenario(p).model_dump_json(exclude={"name", "description"})
              for p in (ROOT / "scenarios/tuning").glob("*.yaml")}
    evaluation = [load_scenario(p) for d in ("evaluation", "evaluation-fleet")
                  for p in (ROOT / "scenarios" / d).glob("*.yaml")]
    assert evaluation and tuning
    assert all(e.model_dump_json(exclude={"name", "description"}) not in tuning for e in evaluation)
    seeds = {load_scenario(p).seed for p in (ROOT / "scenarios/tuning").glob("*.yaml")}
    assert seeds.isdisjoint({e.seed for e in evaluation})
    assert any(e.duration_s >= 86_400 and not e.faults and e.faults_from_trace is None for e in evaluation)


def test_the_fleet_evaluation_set_has_ten_faults_of_every_kind_and_a_noisy_quiet_day() -> None:
    from collections import Counter

    from trainguard.lab.telemetry_sim import run_scenario

    counts: Counter[str] = Counter()
    shapes: dict[str, set[str]] = {}
    quiet = []
    for path in sorted((ROOT / "scenarios/evaluation-fleet").glob("*.yaml")):
        sc = load_scenario(path)
        _, labels = run_scenario(sc)
        counts.update(lab["kind"] for lab in labels)
        for lab in labels:
            shapes.setdefault(lab["kind"], set()).add(lab["variant"])
        if not labels:
            quiet.append(sc)
    assert all(counts[k] >= 10 for k in ("hw_fault", "network", "hang", "slowdown", "nan", "loss_spike", "sdc",
                                         "user_error")), counts
    assert all(len(v) >= 3 for v in shapes.values()), shapes
    assert any(q.duration_s >= 86_400 and q.fleet.clock_skew_s > 0 and q.jobs and q.fleet.idle_nodes
               and q.background.dataloader_stalls_per_h and q.background.restarts_per_day for q in quiet)
