"""`trainguard keys generate` makes keys the printed `security:` section loads; `keys acls` prints grants."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trainguard.cli import main
from trainguard.settings import load_settings


def test_generated_section_configures_every_role(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "generate", "--dir", str(tmp_path / "k"), "--node", "gpu-1", "--worker"]) == 0
    out = capsys.readouterr().out
    section = yaml.safe_load(out[out.index("security:"):])
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(section))
    sec = load_settings(config).security
    assert sec.signer("act").key_id == "act" and sec.signer("worker").key_id == "worker"
    assert sec.signer("node", node="gpu-1").key_id == "gpu-1"
    assert set(sec.required_ring("act").keys) == {"act"} and set(sec.required_ring("node").keys) == {"gpu-1"}
    assert set(sec.ring("worker").keys) == {"worker"}
    assert (tmp_path / "k" / "act.key").stat().st_mode & 0o077 == 0


def test_acls_name_each_role_and_only_act_writes_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "acls", "--principal", "act=User:CN=act"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "--topic tg.actions" in line]
    writers = [line for line in lines if "--operation Write" in line]
    assert len(writers) == 1 and "User:CN=act" in writers[0]
