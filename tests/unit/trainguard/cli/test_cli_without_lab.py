"""The CLI as the runtime image runs it: without the `lab` package.

Each run is a real `python -m trainguard.cli` subprocess whose import system refuses
`trainguard.lab` (a meta-path finder raising ModuleNotFoundError, as an absent package does), so
the test sees what a user of the image sees: commands that need lab stop with one line
and exit code 2; the others work.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from trainguard.cli.commands.needs_lab import needs_lab
from trainguard.cli.errors import UsageError
from trainguard.settings import Settings

HIDE_LAB = """
import runpy, sys

class HideLab:
    def find_spec(self, name, path=None, target=None):
        if name == "trainguard.lab" or name.startswith("trainguard.lab."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, HideLab())
sys.argv = ["trainguard", *sys.argv[1:]]
runpy.run_module("trainguard.cli", run_name="__main__")
"""


def _cli_without_lab(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", HIDE_LAB, *argv], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)


LAB_COMMANDS = [
    ("simulate", ["simulate", "--scenario", "s.yaml", "--out", "o.jsonl"]),
    ("backtest", ["backtest", "rec.jsonl", "--out", "inc.jsonl"]),
    ("backtest-eval", ["backtest-eval", "scenarios"]),
    ("ettr-sim", ["ettr-sim", "--days", "1"]),
    ("demo", ["demo", "--short"]),
    ("broker", ["broker", "status"]),
]


@pytest.mark.parametrize(("command", "argv"), LAB_COMMANDS, ids=[c for c, _ in LAB_COMMANDS])
def test_a_lab_command_without_lab_is_one_line_and_exit_2(tmp_path: Path, command: str, argv: list[str]) -> None:
    done = _cli_without_lab(tmp_path, *argv)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [f"trainguard: {command} needs the lab package (lab is not installed): "
                     "pip install 'trainguard[lab]' (the runtime image leaves it out)"], done.stderr
    assert "Traceback" not in done.stderr


def test_runtime_commands_work_without_lab(tmp_path: Path) -> None:
    helped = _cli_without_lab(tmp_path, "--help")  # imports every command module
    assert helped.returncode == 0, helped.stderr
    assert "simulate" in helped.stdout and "worker" in helped.stdout
    exported = _cli_without_lab(tmp_path, "schemas", "export", str(tmp_path / "schemas"))
    assert exported.returncode == 0, exported.stderr
    assert (tmp_path / "schemas").is_dir() and any((tmp_path / "schemas").iterdir())


def test_the_blocker_really_hides_lab(tmp_path: Path) -> None:
    probe = HIDE_LAB.replace('runpy.run_module("trainguard.cli", run_name="__main__")', "import trainguard.lab.telemetry_sim")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode != 0 and "No module named 'trainguard.lab'" in done.stderr


def _raising(exc: BaseException) -> argparse.Namespace:
    @needs_lab("backtest")
    def handler(args: argparse.Namespace, settings: Settings) -> int:
        raise exc

    with pytest.raises(BaseException) as caught:
        handler(argparse.Namespace(), Settings())
    return argparse.Namespace(error=caught.value)


def test_a_missing_dependency_of_the_lab_extra_names_itself() -> None:
    error = _raising(ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")).error
    assert isinstance(error, UsageError)
    assert str(error).startswith("backtest needs the lab package (matplotlib is not installed): pip install")


def test_any_other_missing_module_is_not_blamed_on_lab() -> None:
    error = _raising(ModuleNotFoundError("No module named 'numpy'", name="numpy")).error
    assert type(error) is ModuleNotFoundError


def test_a_missing_trainguard_lab_is_the_lab_package() -> None:
    error = _raising(ModuleNotFoundError("No module named 'trainguard.lab'", name="trainguard.lab")).error
    assert isinstance(error, UsageError)
    assert str(error).startswith("backtest needs the lab package (lab is not installed): pip install")
