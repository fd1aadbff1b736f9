"""Every docstring example in the runtime packages runs, so no example in the code can rot.

The modules are found by walking the packages (not listed by hand), so a new
module's examples are collected the day it lands. A module that has none is
not a test case; a package that has none at all is a failure, because then the
walk itself is broken.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from types import ModuleType

import pytest

# trainguard holds every room (trainguard.schemas, trainguard.detectors, ...), so walking it walks them all.
PACKAGES = ("trainguard", "benchmarks")


def _modules(package: str) -> list[str]:
    root = importlib.import_module(package)
    names = [package]
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        if info.name.rsplit(".", 1)[-1] != "__main__":  # running a __main__ module is the program, not an import
            names.append(info.name)
    return names


def _has_examples(module: ModuleType) -> bool:
    return any(test.examples for test in doctest.DocTestFinder().find(module))


def _with_examples() -> list[str]:
    return [name for package in PACKAGES for name in _modules(package)
            if _has_examples(importlib.import_module(name))]


WITH_EXAMPLES = _with_examples()


def test_the_walk_finds_examples_in_every_package() -> None:
    found = {name.removeprefix("trainguard.").split(".", 1)[0] for name in WITH_EXAMPLES}
    assert found >= {"schemas", "detectors", "actions", "streams", "collectors", "lab"}, found


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_docstring_examples_run(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, result
