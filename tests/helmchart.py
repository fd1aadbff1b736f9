"""Render the Helm chart with the real helm (built by `make tools` into .tools/bin)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "trainguard"
HELM = ROOT / ".tools" / "bin" / "helm"
KUBE_VERSION = "1.31.0"


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    """Run helm; a missing binary is a setup error, not a skip."""
    assert HELM.exists(), f"{HELM} missing: run `make tools` (builds helm from its Go module)"
    return subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=120)


def render(values: dict[str, Any] | None = None, *, namespace: str = "trainguard",
           tmp: Path | None = None) -> list[dict[str, Any]]:
    """`helm template` the chart with `values`; returns the documents."""
    args = ["template", "tg", str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION]
    if values is not None:
        assert tmp is not None
        path = tmp / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        args += ["-f", str(path)]
    proc = helm(*args)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]
