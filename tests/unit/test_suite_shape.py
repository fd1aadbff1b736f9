"""The suite's own shape: tests import shared helpers from helper modules, never from another test module.

A test module that imports another one runs (and breaks with) the other's
changes, and pytest may collect the imported tests twice. Shared fakes live
in tests/fakes.py, shared set-ups in the `*_kit.py` modules beside the tests
that use them, process and broker helpers in tests/processes.py and
tests/kafka_reads.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _imported_modules(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return names


TEST_MODULES = frozenset(path.stem for path in TESTS.rglob("test_*.py"))


def _is_test_module(name: str) -> bool:
    """`name` is one of the suite's test modules, by dotted path (tests.e2e.test_x) or bare (test_x)."""
    last = name.rsplit(".", 1)[-1]
    return last in TEST_MODULES and (name.startswith("tests.") or "." not in name)


def test_no_test_module_imports_another() -> None:
    offenders = {str(path.relative_to(TESTS)): [m for m in _imported_modules(path) if _is_test_module(m)]
                 for path in TESTS.rglob("*.py")}
    assert {path: mods for path, mods in offenders.items() if mods} == {}


def test_the_check_sees_an_import_of_a_test_module(tmp_path: Path) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text("from tests.e2e.test_actions_local import Tap\nimport test_rails\nfrom aiohttp.test_utils import TestClient\n")
    assert [m for m in _imported_modules(probe) if _is_test_module(m)] == ["tests.e2e.test_actions_local", "test_rails"]


def test_every_test_module_has_a_name_of_its_own() -> None:
    """pytest imports test modules by basename (no packages here): two of one name stop the whole run."""
    names = sorted(path.name for path in TESTS.rglob("test_*.py"))
    assert sorted({n for n in names if names.count(n) > 1}) == []
