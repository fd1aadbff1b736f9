"""docker-compose.yml's key wiring: the keys one shot makes every pair once, and each service gets its own files only.

There is no Docker engine here, so the stack cannot be started. What is checked
instead: the file's structure (who mounts which volume, read-only, after the one
shot succeeded), and the one shot's own script, run for real with the real CLI
(paths moved under a temporary directory): the files each service's volume
receives, and that each service's TRAINGUARD_SECURITY__* settings load keys
that belong together (act verifies what the worker and the console sign).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
CONSUMERS = ("worker", "act", "console")
MOUNT = "/etc/trainguard/keys"


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def key_volumes(svc: dict[str, Any]) -> dict[str, str]:
    """volume name -> mount of the key volumes a service mounts."""
    names = {n for n in compose()["volumes"] if n == "keys" or n.endswith("-keys")}
    return {v.split(":")[0]: v.split(":", 1)[1] for v in svc.get("volumes", []) if v.split(":")[0] in names}


def installs() -> dict[str, set[str]]:
    """volume name -> the files the one shot installs into it (from its script's `install` calls)."""
    svc = compose()["services"]["keys"]
    mounts = {mount: name for name, mount in key_volumes(svc).items()}
    got: dict[str, set[str]] = {}
    for part in svc["command"][0].split("&&")[1:]:
        words = shlex.split(part)
        assert words[0] == "install"
        dest = Path(words[-1])
        got.setdefault(mounts[str(dest.parent)], set()).add(dest.name)
    return got


def test_each_service_mounts_only_its_own_keys_read_only_after_the_one_shot() -> None:
    services = compose()["services"]
    keys = services["keys"]
    assert keys["restart"] == "no" and "--keep-existing" in keys["command"][0]
    assert set(key_volumes(keys)) == {"keys", "worker-keys", "act-keys", "console-keys"}
    files = installs()
    assert files == {"worker-keys": {"worker.key"}, "act-keys": {"worker.pub", "console.pub"},
                     "console-keys": {"console.key"}}
    reach: dict[str, set[str]] = {}
    for name, svc in services.items():
        if name == "keys":
            continue
        mounted = key_volumes(svc)
        assert "keys" not in mounted, f"{name} mounts every key pair"
        for volume, mount in mounted.items():
            assert mount == f"{MOUNT}:ro", f"{name}: {volume} must be mounted read-only at {MOUNT}"
            reach.setdefault(name, set()).update(files[volume])
    assert reach == {"worker": {"worker.key"}, "act": {"worker.pub", "console.pub"}, "console": {"console.key"}}
    for name in CONSUMERS:
        assert services[name]["depends_on"]["keys"] == {"condition": "service_completed_successfully"}
        for var, value in services[name]["environment"].items():
            if var.startswith("TRAINGUARD_SECURITY__"):
                paths = [p.strip('[]" ') for p in value.split(",")]
                assert all(Path(p).parent == Path(MOUNT) and Path(p).name in reach[name] for p in paths), var
    assert services["worker"]["environment"]["TRAINGUARD_SECURITY__WORKER_PRIVATE_KEY"].endswith("/worker.key")
    assert services["console"]["environment"]["TRAINGUARD_SECURITY__CONSOLE_PRIVATE_KEY"].endswith("/console.key")


def _run_one_shot(root: Path) -> None:
    """The keys service's script, its /keys/* mounts moved under `root` (owner flags only when root)."""
    script = compose()["services"]["keys"]["command"][0].replace("/keys/", f"{root}/keys/")
    assert " /keys" not in script, script  # nothing may write outside the temporary directory
    if os.geteuid() != 0:
        script = script.replace("-o 10001 -g 0 ", "")
    for name in ("all", "worker", "act", "console"):
        (root / "keys" / name).mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["/bin/sh", "-ec", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_one_shot_script_runs_twice_and_each_services_settings_load_matching_keys(tmp_path: Path) -> None:
    from trainguard.schemas.codec import Codec
    from trainguard.schemas.records import Incident
    from trainguard.settings import Settings

    _run_one_shot(tmp_path)
    first = {p: p.read_bytes() for p in (tmp_path / "keys").rglob("*") if p.is_file()}
    _run_one_shot(tmp_path)  # a second `docker compose up`: nothing replaced
    assert {p: p.read_bytes() for p in (tmp_path / "keys").rglob("*") if p.is_file()} == first
    assert (tmp_path / "keys" / "worker" / "worker.key").stat().st_mode & 0o777 == 0o400

    def settings(service: str) -> Settings:
        env = compose()["services"][service]["environment"]
        volume = {"worker": "worker", "act": "act", "console": "console"}[service]
        section = {k.removeprefix("TRAINGUARD_SECURITY__").lower(): v.replace(MOUNT, str(tmp_path / "keys" / volume))
                   for k, v in env.items() if k.startswith("TRAINGUARD_SECURITY__")}
        lists = {k: [p.strip('[]" ') for p in v.split(",")] for k, v in section.items() if v.startswith("[")}
        return Settings.model_validate({"security": {**section, **lists}})

    value = Codec().encode(Incident(ts=1.0, id="i", kind="hang", job="j", onset=1.0, detected_at=1.0))
    act = settings("act").security
    worker_sig = settings("worker").security.signer("worker").headers(value)
    console_sig = settings("console").security.signer("console").headers(value)
    assert act.incident_ring().check(value, worker_sig)[1] == ""
    assert act.required_ring("console").check(value, console_sig)[1] == ""
    assert act.incident_ring().check(value, console_sig)[1] != ""  # the console cannot pass for the worker
