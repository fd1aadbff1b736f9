"""The wheel a user installs: one import package, `trainguard`, and nothing else on their path.

The wheel is built by the real pip from this checkout (no build isolation: setuptools is
already in the venv), unpacked, and imported by a fresh interpreter that runs without
site processing (`-S`), so this checkout's editable install (a `.pth` finder) is not on
its path: what it imports comes from the wheel, its dependencies from site-packages.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
ROOMS = ("schemas", "detectors", "actions", "streams", "collectors", "lab")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(out), str(ROOT)], check=True, timeout=300,
                   capture_output=True)
    (built,) = out.glob("trainguard-*.whl")
    return built


@pytest.fixture(scope="module")
def unpacked(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    zipfile.ZipFile(wheel).extractall(target)
    return target


def _python(unpacked: Path, code: str) -> subprocess.CompletedProcess[str]:
    """Run `code` with the unpacked wheel first on the path and no .pth files processed."""
    paths = [str(unpacked), *(p for p in sys.path if p.endswith("site-packages"))]  # the venv's and, beneath, the base's
    prelude = f"import sys; sys.path[:0] = {paths!r}\n"
    return subprocess.run([sys.executable, "-S", "-c", prelude + code], capture_output=True, text=True,
                          timeout=120, cwd=unpacked)


def test_the_wheel_installs_one_top_level_package(wheel: Path) -> None:
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert tops == {"trainguard", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}, tops


def test_every_room_ships_inside_trainguard(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for room in ROOMS:
        assert f"trainguard/{room}/__init__.py" in names, room
    assert "trainguard/streams/console/static/index.html" in names  # package data follows the rooms


def test_entry_points_name_the_one_package(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    (entry_points,) = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
    targets = [line.split("=", 1)[1].strip() for line in archive.read(entry_points).decode().splitlines()
               if "=" in line]
    assert len(targets) >= 14 and all(t.startswith("trainguard.") for t in targets), targets


def test_an_installed_trainguard_imports_its_rooms_and_loads_its_plugins(unpacked: Path) -> None:
    done = _python(unpacked, (
        "import importlib.metadata as md, trainguard, trainguard.schemas.records, trainguard.streams.worker.factory\n"
        f"assert trainguard.__file__.startswith({str(unpacked)!r}), trainguard.__file__\n"
        "eps = [e for e in md.entry_points(group='trainguard.detectors') if e.value.startswith('trainguard.')]\n"
        "assert len(eps) >= 10, eps\n"
        "for e in eps: e.load()\n"
        "print('ok', len(eps))\n"))
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stderr


@pytest.mark.parametrize("room", ROOMS)
def test_a_bare_room_is_not_on_the_users_path(unpacked: Path, room: str) -> None:
    done = _python(unpacked, f"import {room}\n")
    assert done.returncode != 0 and f"No module named '{room}'" in done.stderr, done.stderr


def test_the_installed_cli_answers(unpacked: Path) -> None:
    done = _python(unpacked, "import sys, runpy; sys.argv = ['trainguard', 'detectors', 'list']\n"
                             "runpy.run_module('trainguard.cli', run_name='__main__')\n")
    assert done.returncode == 0 and "hang" in done.stdout, done.stderr


def test_the_runtime_image_context_builds_a_wheel_without_lab(tmp_path: Path) -> None:
    """deploy/Dockerfile copies the rooms and trainguard/ but not lab/: the trainguard/lab link dangles there,
    and the wheel it builds simply has no trainguard.lab (the CLI's lab commands then say so, exit 2)."""
    context = tmp_path / "src"
    context.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "schemas", "detectors", "actions", "streams",
                 "collectors", "trainguard"):
        subprocess.run(["cp", "-a", str(ROOT / name), str(context / name)], check=True)
    assert (context / "trainguard" / "lab").is_symlink() and not (context / "trainguard" / "lab").exists()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(tmp_path), str(context)], check=True, timeout=300,
                   capture_output=True)
    (built,) = tmp_path.glob("trainguard-*.whl")
    names = zipfile.ZipFile(built).namelist()
    assert "trainguard/streams/worker/factory.py" in names
    assert not [n for n in names if n.startswith("trainguard/lab")]
