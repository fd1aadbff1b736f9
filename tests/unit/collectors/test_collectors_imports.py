"""Collectors depend only on schemas (plus stdlib, pynvml, torch...); only their Kafka edges import Kafka."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[3] / "collectors"
KAFKA_EDGES = {"publisher.py", "command_feed.py"}
FORBIDDEN = ("detectors", "actions", "streams", "trainguard")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_collectors_import_rules() -> None:
    modules = sorted(PACKAGE.glob("*.py"))
    assert len(modules) > 10
    for path in modules:
        found = _imports(path)
        assert not found & set(FORBIDDEN), f"{path.name} imports {found & set(FORBIDDEN)}"
        if path.name not in KAFKA_EDGES:
            assert not found & {"kafka", "faust", "aiokafka"}, f"{path.name} imports a Kafka client"
