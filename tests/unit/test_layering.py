"""The design card's import rules, enforced on the source tree.

schemas <- detectors <- actions <- streams, and schemas <- collectors; only
the Kafka edges import Kafka clients; detectors never read the wall clock.
Rooms: the services under `streams/` import nothing from each other (only the
shared edge at its top), the node agent only schemas and collectors, the
training library (hook, topology, checkpoints) only schemas, collectors and
itself, and act's core (`actions/core.py`) no Kafka client and no streams.
`lab` (offline work: simulators, backtest, demo, local broker) is left out of
the runtime image, so no runtime package imports it, and `trainguard` (the CLI)
imports it only inside the commands that need it; lab itself may import anything.

One package on a user's path: the rooms are the top-level folders of the repository and
are imported as `trainguard.<room>` (trainguard/<room> links to each folder). The rules
below read `trainguard.schemas.records` as the room `schemas`; a bare `import schemas`
is refused outright, because an installed trainguard has no such package.
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
PROJECT = {"schemas", "detectors", "actions", "streams", "collectors", "trainguard", "lab"}
KAFKA = {"kafka", "aiokafka", "faust", "confluent_kafka"}
CLOCK_CALLS = {"time", "monotonic", "perf_counter", "now", "utcnow", "today", "time_ns"}
ROOMS = ("schemas", "detectors", "actions", "streams", "collectors", "lab")  # trainguard.<room> on the path


def _room(name: str) -> str:
    """`trainguard.schemas.records` -> `schemas.records`: the rules speak of rooms, the code imports them
    through the one package. Anything else is returned as it is."""
    head, _, rest = name.partition(".")
    if head == "trainguard" and rest.split(".")[0] in ROOMS:
        return rest
    return name


def _raw_imports(path: Path) -> set[str]:
    """Every absolute module name the file imports, as written."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def _imports(path: Path) -> set[str]:
    return {_room(name).split(".")[0] for name in _raw_imports(path)}


def _module_level_imports(path: Path) -> set[str]:
    """Top-level modules imported when the module is imported: its body, and if/try blocks there,
    but not `if TYPE_CHECKING:` blocks nor anything inside a function or class."""
    out: set[str] = set()
    pending = list(ast.parse(path.read_text(), filename=str(path)).body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            out.update(_room(alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(_room(node.module).split(".")[0])
        elif isinstance(node, ast.If) and not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            pending += node.body + node.orelse
        elif isinstance(node, ast.Try):
            pending += node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body]
    return out


def _files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _modules(path: Path) -> set[str]:
    """Full dotted names of what `path` imports (`from a.b import c` gives `a.b` and `a.b.c`)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(_room(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(_room(node.module))
            out.update(_room(f"{node.module}.{alias.name}") for alias in node.names)
    return out


def _within(name: str, room: str) -> bool:
    return name == room or name.startswith(room + ".")


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


def test_runtime_packages_never_import_lab() -> None:
    for package in sorted(ALLOWED):
        files = _files(package)
        assert files, package
        for path in files:
            assert "lab" not in _imports(path), f"{path.relative_to(ROOT)} imports lab (left out of the runtime image)"


def test_the_cli_imports_lab_only_inside_commands() -> None:
    files = _files("trainguard")
    lazy = [p for p in files if "lab" in _imports(p)]
    assert len(lazy) >= 5, lazy  # simulate, backtest, ettr-sim, demo, broker: the walk saw the lazy imports
    eager = [str(p.relative_to(ROOT)) for p in files if "lab" in _module_level_imports(p)]
    assert not eager, f"import lab at module level (the runtime image has no lab): {eager}"


def test_module_level_imports_see_through_if_and_try_but_not_functions(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\ntry:\n    import b\n"
                     "except ImportError:\n    import c\nif True:\n    from d.x import y\n"
                     "def f() -> None:\n    import e\n")
    assert _module_level_imports(probe) == {"typing", "b", "c", "d"}


SERVICE_ROOMS = ["streams.worker", "streams.act", "streams.console", "streams.alerts"]


@pytest.mark.parametrize("room", SERVICE_ROOMS)
def test_service_rooms_import_nothing_from_each_other(room: str) -> None:
    files = _files(room.replace(".", "/"))
    assert files, room
    others = [r for r in SERVICE_ROOMS if r != room]
    for path in files:
        bad = sorted(m for m in _modules(path) for other in others if _within(m, other))
        assert not bad, f"{path.relative_to(ROOT)} imports {bad} (another service's room)"


def test_the_node_agent_imports_only_schemas_and_collectors() -> None:
    files = _files("collectors/agent")
    assert len(files) >= 10, files  # the agent and its self-check programs
    for path in files:
        bad = (_imports(path) & PROJECT) - {"schemas", "collectors"}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


TRAINING_LIBRARY = ["trainguard.training_hook", "trainguard.topology", "trainguard.checkpoint"]


def test_the_training_library_imports_only_schemas_collectors_and_itself() -> None:
    files = [ROOT / "trainguard" / "__init__.py", ROOT / "trainguard" / "training_hook.py",
             ROOT / "trainguard" / "topology.py", *_files("trainguard/checkpoint")]
    for path in files:
        for name in _modules(path):
            top = name.split(".")[0]
            if top not in PROJECT or top in {"schemas", "collectors"}:
                continue
            ok = name == "trainguard" or any(_within(name, lib) for lib in TRAINING_LIBRARY)
            assert ok, f"{path.relative_to(ROOT)} imports {name} (a training job must not pull in the CLI or services)"


def test_acts_core_imports_no_kafka_client_and_no_streams() -> None:
    used = _imports(ROOT / "actions" / "core.py")
    assert "schemas" in used  # the walk saw its imports
    assert not used & (KAFKA | {"streams", "prometheus_client"}), sorted(used)


def test_modules_names_what_from_imports_bring_in(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import a.b\nfrom c.d import e\nfrom . import f\n")
    assert _modules(probe) == {"a.b", "c.d", "c.d.e"}


# ------------------------------------------------------------------ import cycles
# Every import statement counts, `if TYPE_CHECKING:` blocks and imports inside functions included: a cycle
# hidden behind either is still two modules that cannot be understood (or moved) one without the other.
RUNTIME = ["schemas", "detectors", "actions", "streams", "collectors", "trainguard", "lab", "benchmarks"]


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph(root: Path, packages: list[str]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (`from a.b import c` names module a.b.c if there is one, else a.b)."""
    files = {_module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}

    def resolve(name: str) -> str | None:
        name = _room(name)
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets += [base, *(f"{base}.{alias.name}" for alias in node.names)]
        graph[name] = {t for t in map(resolve, targets) if t and t != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or round a loop (Tarjan's components of size > 1)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            if group:
                out.append(sorted([v, *group]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_in_the_runtime_packages() -> None:
    graph = _import_graph(ROOT, RUNTIME)
    assert len(graph) > 100 and graph["actions.engine"]  # the walk saw the packages and their imports
    assert _cycles(graph) == []


def test_the_cycle_finder_sees_cycles_behind_type_checking_and_functions(tmp_path: Path) -> None:
    pkg = tmp_path / "p"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from p.b import x\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.a import y\n")
    (pkg / "c.py").write_text("def f() -> None:\n    from . import d\n")
    (pkg / "d.py").write_text("import p.c\n")
    (pkg / "e.py").write_text("from p import a\n")  # imports into a cycle, is not part of one
    assert _cycles(_import_graph(tmp_path, ["p"])) == [["p.a", "p.b"], ["p.c", "p.d"]]


def test_act_takes_its_building_blocks_from_schemas_not_the_detectors() -> None:
    # Bounded, bounded_evictions and anomaly_id live in schemas (schemas.bounded, schemas.ids).
    for path in _files("actions"):
        bad = sorted(m for m in _modules(path) if _within(m, "detectors.common") or _within(m, "detectors.base"))
        assert not bad, f"{path.relative_to(ROOT)} imports {bad} (use schemas.bounded / schemas.ids)"


# ------------------------------------------------------------------ one package on a user's path
CODE = [*RUNTIME, "tests", "tools"]


def test_every_room_is_linked_into_the_one_package() -> None:
    for room in ROOMS:
        link = ROOT / "trainguard" / room
        assert link.is_symlink() and link.resolve() == (ROOT / room).resolve(), f"trainguard/{room}"


def test_nothing_imports_a_room_by_its_bare_name() -> None:
    files = [p for top in CODE if (ROOT / top).is_dir() for p in sorted((ROOT / top).rglob("*.py"))]
    assert len(files) > 300  # the walk saw the tree (rglob does not follow the links under trainguard/)
    bare = [f"{p.relative_to(ROOT)}: {name}" for p in files for name in sorted(_raw_imports(p))
            if name.split(".")[0] in ROOMS]
    assert not bare, f"import trainguard.<room>, not the bare room (an installed trainguard has no such package): {bare}"


def test_room_names_are_read_through_the_package(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import trainguard.schemas.records\nfrom trainguard.detectors import base\nimport trainguard.cli\n")
    assert _modules(probe) == {"schemas.records", "detectors", "detectors.base", "trainguard.cli"}
    assert _imports(probe) == {"schemas", "detectors", "trainguard"}
