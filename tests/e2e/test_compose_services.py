"""docker-compose.yml's trainguard services, run as written, as real processes (no Docker engine here).

Each service's `command` and `environment` come from the compose file; only
what Docker would provide is mapped: the broker address (our local broker
instead of the `kafka` service), the paths inside the image (the repo's
scenarios, a temp dir for /var/lib/trainguard) and the host ports (free
ones, in place of the ports Prometheus scrapes). Then Prometheus' targets
are scraped: each answers with trainguard metrics, and the image's
HEALTHCHECK script passes against it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from processes import free_port, stop_all

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def scrape(port: int, timeout_s: float = 120) -> str:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                return r.read().decode()
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"nothing served metrics on {port}")


def run_keys_one_shot(svc: dict[str, Any], root: Path) -> dict[str, Path]:
    """Run the keys service's script as written (its volumes as directories under `root`, owner flags only
    as root); returns volume name -> directory."""
    mounts = {v.split(":")[0]: v.split(":")[1] for v in svc["volumes"]}
    script = svc["command"][0]
    for name, mount in mounts.items():
        (root / name).mkdir(parents=True)
        script = re.sub(re.escape(mount) + r"(?=/|\s|$)", str(root / name), script)
    assert " /keys" not in script, script  # nothing may write outside the temporary volumes
    if os.geteuid() != 0:
        script = script.replace("-o 10001 -g 0 ", "")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run([*svc["entrypoint"], script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return {name: root / name for name in mounts}


def test_compose_services_run_and_serve_what_prometheus_scrapes(kafka: str, topic_prefix: str, tmp_path: Path) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    prom = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    targets = {t.rsplit(":", 1)[0]: t.rsplit(":", 1)[1] for job in prom["scrape_configs"]
               for sc in job["static_configs"] for t in sc["targets"] if not t.startswith("localhost")}
    ports = {port: str(free_port()) for port in targets.values()}
    state = tmp_path / "var-lib-trainguard"
    state.mkdir()
    mounts = run_keys_one_shot(compose["keys"], tmp_path / "volumes")

    def argv(service: str) -> list[str]:
        out = []
        for arg in compose[service]["command"]:
            arg = str(arg).replace("/opt/trainguard/scenarios", str(ROOT / "scenarios"))
            arg = arg.replace("/var/lib/trainguard", str(state))
            out.append(ports.get(arg, arg))
        return [sys.executable, "-m", "trainguard.cli", *out]

    def env(service: str) -> dict[str, str]:
        e = {k: v for k, v in os.environ.items() if not k.startswith("TRAINGUARD_")}
        for key, value in (compose[service].get("environment") or {}).items():
            value = str(value)
            for old, new in ports.items():
                value = value.replace(f":{old}/", f":{new}/")
                value = new if value == old else value
            for volume in compose[service].get("volumes", []):  # the service's key volume, as compose mounts it
                name, mount = volume.split(":")[:2]
                if name in mounts:
                    value = value.replace(mount, str(mounts[name]))
            e[key] = value
        e.update(TRAINGUARD_BROKER__BOOTSTRAP=kafka, TRAINGUARD_TOPICS__PREFIX=topic_prefix,
                 TRAINGUARD_TOPICS__PARTITIONS="2", TRAINGUARD_WORKER__APP_ID=f"w-{topic_prefix}",
                 TRAINGUARD_WORKER__WEB_PORT=str(free_port()), TRAINGUARD_ACTIONS__GROUP_ID=f"a-{topic_prefix}",
                 TRAINGUARD_WORKER__STATE_DIR=str(state / "worker"),
                 TRAINGUARD_ACTIONS__STATE_DIR=str(state / "actions"))
        return e

    sim = subprocess.run(argv("simulate"), env=env("simulate"), capture_output=True, text=True, timeout=300,
                         cwd=state)
    assert sim.returncode == 0, sim.stderr
    recording = state / "fleet.jsonl"
    assert recording.stat().st_size > 0

    procs: list[subprocess.Popen[Any]] = []
    try:
        for service in targets:
            procs.append(subprocess.Popen(argv(service), env=env(service), cwd=state, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True))
        # Replay a slice of the fleet as fast as possible (compose paces the whole of it at 20x).
        head = state / "head.jsonl"
        with recording.open() as src:
            head.write_text("".join(line for _, line in zip(range(2000), src)))
        replay = argv("replay")
        replay[replay.index(str(recording))] = str(head)
        replay[replay.index("--speed") + 1] = "max"
        done = subprocess.run(replay, env=env("replay"), capture_output=True, text=True, timeout=300, cwd=state)
        assert done.returncode == 0, done.stderr
        expected = {"worker": "trainguard_worker_", "act": "trainguard_decisions_total"}
        for service, port in targets.items():
            body = scrape(int(ports[port]))
            assert expected[service] in body, (service, body[:500])
            check = subprocess.run([sys.executable, str(ROOT / "deploy/healthcheck.py")], env=env(service),
                                   capture_output=True, text=True, timeout=30)
            assert check.returncode == 0, (service, check.stderr)
        for p in procs:
            assert p.poll() is None, p.stderr.read() if p.stderr else ""
    finally:
        stop_all(procs, timeout_s=30)
