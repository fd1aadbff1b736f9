"""The command line: help, subcommands, and config errors as one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trainguard.cli import COMMANDS, build_parser, main


def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for name in ("broker", "worker", "act", "schemas", *COMMANDS):
        assert name in out


@pytest.mark.parametrize("command", COMMANDS)
def test_each_subcommand_has_help(command: str) -> None:
    parser = build_parser()
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args([command, "--help"])
    assert exit_.value.code == 0


def test_bad_config_exits_2_with_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("worker:\n  fetch_max_records: -3\n")
    proc = subprocess.run(
        [sys.executable, "-m", "trainguard.cli", "--config", str(cfg), "schemas", "export", str(tmp_path / "s")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "worker.fetch_max_records" in lines[0]


def test_schemas_export_writes_one_file_per_record(tmp_path: Path) -> None:
    assert main(["schemas", "export", str(tmp_path)]) == 0
    names = {p.name for p in tmp_path.iterdir()}
    assert "gpu_sample.schema.json" in names and "step.schema.json" in names and "incident.schema.json" in names
