"""Ed25519 detached signatures, key files, command freshness, and the `security:` section."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from trainguard.schemas.codec import Codec
from trainguard.schemas.keys import SecuritySettings
from trainguard.schemas.records import ActionCommand, ActionResult
from trainguard.schemas.signing import (
    KeyFileError,
    command_problem,
    generate,
    load_ring,
    load_signer,
    new_command_id,
    signed_by_node,
)


def test_generated_keys_sign_and_verify_and_private_key_is_private(tmp_path: Path) -> None:
    private, public = generate(tmp_path, "act")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    signer, ring = load_signer(private), load_ring([tmp_path])
    payload = Codec().encode(ActionCommand(ts=1.0, expires=2.0, id="c1", action="evict_node", nodes=["n1"]))
    headers = signer.headers(payload)
    assert ring.check(payload, headers) == ("act", "")
    forged = payload.replace(b'"n1"', b'"n2"')
    assert ring.check(forged, headers)[1] == "signature does not verify with key act"
    assert ring.check(payload, [])[1].startswith("unsigned")
    with pytest.raises(KeyFileError, match="exists"):
        generate(tmp_path, "act")  # never silently replace a key


def test_a_public_key_cannot_be_used_as_a_private_key(tmp_path: Path) -> None:
    _, public = generate(tmp_path, "act")
    with pytest.raises(KeyFileError, match="act.pub"):
        load_signer(public)


def test_results_must_be_signed_by_the_node_they_name(tmp_path: Path) -> None:
    for node in ("n1", "n2", "n1@2027"):
        generate(tmp_path, node)
    ring = load_ring([tmp_path])
    payload = Codec().encode(ActionResult(ts=1.0, command_id="c", action="stop", status="ok", node="n1"))
    assert signed_by_node(ring, payload, load_signer(tmp_path / "n1.key").headers(payload), "n1") == ""
    assert signed_by_node(ring, payload, load_signer(tmp_path / "n1@2027.key").headers(payload), "n1") == ""
    other = signed_by_node(ring, payload, load_signer(tmp_path / "n2.key").headers(payload), "n1")
    assert "not node 'n1'" in other
    assert signed_by_node(ring, payload, None, "n1").startswith("unsigned")


def test_command_freshness() -> None:
    cmd = ActionCommand(ts=100.0, expires=160.0, id="c", action="stop")
    assert command_problem(cmd, now=120.0, seen=set(), max_skew_s=5) == ""
    assert command_problem(cmd, now=170.0, seen=set(), max_skew_s=5).startswith("expired")
    assert command_problem(cmd, now=90.0, seen=set(), max_skew_s=5).startswith("issued")
    assert command_problem(cmd, now=120.0, seen={"c"}, max_skew_s=5) == "replayed command id"
    assert command_problem(ActionCommand(ts=100.0, id="c", action="stop"), now=100.0, seen=set(), max_skew_s=5)


def test_command_ids_are_unpredictable() -> None:
    a, b = new_command_id("d-0"), new_command_id("d-0")
    assert a != b and a.startswith("d-0-") and len(a.rsplit("-", 1)[1]) == 32


def test_security_section_has_no_default_key_and_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="trainguard keys generate"):
        SecuritySettings().signer("act")
    with pytest.raises(KeyFileError, match="act_public_keys is empty"):
        SecuritySettings().required_ring("act")
    with pytest.raises(KeyFileError, match="not found"):
        SecuritySettings(node_private_key=tmp_path / "{node}.key").signer("node", node="n9")
    generate(tmp_path, "n9")
    signer = SecuritySettings(node_private_key=tmp_path / "{node}.key").signer("node", node="n9")
    assert signer.key_id == "n9" and "private_key" not in repr(signer)
    with pytest.raises(ValueError, match="extra"):
        SecuritySettings(act_privte_key=tmp_path)  # type: ignore[call-arg]
