"""The design card's import rules, enforced on the source tree.

schemas <- detectors <- actions <- streams, and schemas <- collectors; only
the Kafka edges import Kafka clients; detectors never read the wall clock.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ALLOWED: dict[str, set[str]] = {
    "schemas": {"schemas"},
    "detectors": {"schemas", "detectors"},
    "actions": {"schemas", "detectors", "actions"},
    "streams": {"schemas", "detectors", "actions", "streams"},
    "collectors": {"schemas", "collectors"},
}
PROJECT = {"schemas", "detectors", "actions", "streams", "collectors", "trainguard"}
KAFKA = {"kafka", "aiokafka", "faust", "confluent_kafka"}
CLOCK_CALLS = {"time", "monotonic", "perf_counter", "now", "utcnow", "today", "time_ns"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def _files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_flow_one_way(package: str) -> None:
    for path in _files(package):
        bad = (_imports(path) & PROJECT) - ALLOWED[package]
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


# The one exception: the client options builder imports the flavour's SASL token-provider base
# class, inside the function, only when a client of that flavour is built (OAUTHBEARER).
CLIENT_OPTIONS = ROOT / "schemas" / "kafka_config.py"


@pytest.mark.parametrize("package", ["schemas", "detectors", "actions"])
def test_pure_packages_import_no_kafka_client(package: str) -> None:
    for path in _files(package):
        if path == CLIENT_OPTIONS:
            continue
        bad = _imports(path) & KAFKA
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_only_collector_edges_import_kafka() -> None:
    files = _files("collectors")
    assert len(files) > 10  # the walk found the package
    users = [p.name for p in files if _imports(p) & KAFKA]
    assert all(name in {"publisher.py", "command_feed.py"} for name in users), users


def test_detectors_never_read_the_wall_clock() -> None:
    for path in _files("detectors"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                if isinstance(owner, ast.Name) and owner.id in {"time", "datetime", "date"}:
                    assert node.func.attr not in CLOCK_CALLS, f"{path.name}:{node.lineno} reads the clock"
        assert not (_imports(path) & {"socket", "requests", "urllib", "subprocess"}), path.name


def test_client_options_import_kafka_clients_only_inside_functions() -> None:
    tree = ast.parse(CLIENT_OPTIONS.read_text())
    top = {alias.name.split(".")[0] for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
    top |= {node.module.split(".")[0] for node in tree.body if isinstance(node, ast.ImportFrom) and node.module}
    assert not top & KAFKA
