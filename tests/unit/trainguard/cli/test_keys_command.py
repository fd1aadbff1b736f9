"""`trainguard keys generate` makes keys the printed `security:` section loads; `keys acls` prints grants."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trainguard.cli import main
from trainguard.settings import load_settings


def test_generated_section_configures_every_role(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """By default the worker's and the console's keys are made too: act trusts only what they sign."""
    assert main(["keys", "generate", "--dir", str(tmp_path / "k"), "--node", "gpu-1"]) == 0
    out = capsys.readouterr().out
    section = yaml.safe_load(out[out.index("security:"):])
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(section))
    sec = load_settings(config).security
    assert sec.signer("act").key_id == "act" and sec.signer("worker").key_id == "worker"
    assert sec.signer("node", node="gpu-1").key_id == "gpu-1"
    assert set(sec.required_ring("act").keys) == {"act"} and set(sec.required_ring("node").keys) == {"gpu-1"}
    assert set(sec.ring("worker").keys) == {"worker"}
    assert sec.signer("console").key_id == "console" and set(sec.required_ring("console").keys) == {"console"}
    assert (tmp_path / "k" / "console.key").stat().st_mode & 0o077 == 0
    assert (tmp_path / "k" / "act.key").stat().st_mode & 0o077 == 0


def test_no_worker_and_no_console_make_neither(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "generate", "--dir", str(tmp_path), "--no-worker", "--no-console"]) == 0
    out = capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["act.key", "act.pub"]
    assert "worker_private_key" not in out and "console_private_key" not in out


def test_acls_name_each_role_and_only_act_writes_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "acls", "--principal", "act=User:CN=act"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "--topic tg.actions" in line]
    writers = [line for line in lines if "--operation Write" in line]
    assert len(writers) == 1 and "User:CN=act" in writers[0]


def test_acls_only_the_console_writes_operator_commands_and_act_reads_them(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "acls"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "--topic tg.operator " in line + " "]
    writers = [line for line in lines if "--operation Write" in line]
    readers = [line for line in lines if "--operation Read" in line]
    assert len(writers) == 1 and "User:trainguard-console" in writers[0]
    assert {line.split("--allow-principal ")[1].split()[0] for line in readers} == {
        "User:trainguard-act", "User:trainguard-console"}


def test_the_console_is_granted_every_topic_its_feed_reads_and_never_act_state() -> None:
    from trainguard.cli.kafka_acls import recommended
    from trainguard.streams.console.feed import READ

    grants = [g for g in recommended("p.") if g.role == "console"]
    assert {g.name for g in grants if g.operation == "READ"} == {f"p.{t}" for t in READ}
    assert not [g for g in grants if "act-state" in g.name or g.name == "p.actions" and g.operation == "WRITE"]


def test_keep_existing_keeps_every_pair_and_a_second_run_changes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The compose keys one-shot runs at every `up`: a second run must neither fail nor replace a key."""
    args = ["keys", "generate", "--dir", str(tmp_path), "--node", "n1", "--keep-existing"]
    assert main(args) == 0
    before = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(args) == 0
    out = capsys.readouterr().out
    assert {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert "wrote" not in out and out.count("kept ") == 4
    assert main(["keys", "generate", "--dir", str(tmp_path)]) == 2  # without the flag: refused, as before


def test_keep_existing_refuses_a_half_pair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "generate", "--dir", str(tmp_path), "--no-console", "--no-worker"]) == 0
    (tmp_path / "act.pub").unlink()  # a private key whose public half is gone: never silently re-made
    key = (tmp_path / "act.key").read_bytes()
    assert main(["keys", "generate", "--dir", str(tmp_path), "--no-console", "--no-worker", "--keep-existing"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "act.key: exists" in err[0] and (tmp_path / "act.key").read_bytes() == key
