"""Checkpoint and topology records are believed only when the job's current attempt signed them (issue 20).

Real Ed25519 keys throughout: the pure `AttemptKeys` (which announcements count, which records
a key vouches for), then act's edge (`ActCore.trusts` then `observe`, what the loop does with
each record) with real node keys, the real journal and a real plan that restarts the job.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fakes import Scripted

from tests.unit.actions.rails_kit import build, events, hw
from trainguard.actions.attempt_keys import AttemptKeys, Verdict
from trainguard.actions.core import ActCore
from trainguard.actions.knowledge import JobKnowledge
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import AttemptKey, CheckpointEvent, JobTopology, Record
from trainguard.schemas.signing import Signer, attempt_key_id, generate, load_ring, load_signer, public_b64

CODEC = Codec()


class Attempt:
    """What an agent mints for one start of its training process: the key and its announcement."""

    def __init__(self, job: str, attempt: int, node: str, nonce: str = "00") -> None:
        self.private = Ed25519PrivateKey.generate()
        self.kid = attempt_key_id(job, attempt, node, nonce)
        self.announcement = AttemptKey(ts=1.0, job=job, attempt=attempt, node=node, key_id=self.kid,
                                       public_key=public_b64(self.private.public_key()))

    def sign(self, record: Record) -> tuple[bytes, list[tuple[str, bytes]]]:
        value = CODEC.encode(record)
        return value, Signer(self.kid, self.private).headers(value)


def ckpt(job: str = "j0", step: int = 200, node: str = "", path: str = "/ck/200") -> CheckpointEvent:
    return CheckpointEvent(ts=2.0, job=job, step=step, path=path, node=node)


def topo(job: str, nodes: list[str]) -> JobTopology:
    return JobTopology(ts=2.0, job=job, world_size=len(nodes), rank_nodes=dict(enumerate(nodes)))


def verify(keys: AttemptKeys, record: CheckpointEvent | JobTopology, signed: tuple[bytes, list[tuple[str, bytes]]],
           ) -> Verdict:
    return keys.verify(record, *signed)


def admitted(keys: AttemptKeys, attempt: Attempt, *, commanded: tuple[int, list[str]] | None = None,
             members: list[str] | None = None) -> str:
    problem = keys.key_problem(attempt.announcement, commanded=commanded, members=members)
    if not problem:
        keys.admit(attempt.announcement)
    return problem


# ------------------------------------------------------------ pure verification


def test_only_a_current_attempt_key_vouches_for_a_checkpoint() -> None:
    keys, n1 = AttemptKeys(), Attempt("j0", 0, "n1")
    assert admitted(keys, n1) == ""  # attempt 0, no topology yet: trust on first use
    good = ckpt(node="n1")
    assert verify(keys, good, n1.sign(good)) == Verdict()
    assert "unsigned" in verify(keys, good, (CODEC.encode(good), [])).problem
    impostor = Attempt("j0", 0, "n1")  # a forger's own key, under the real key id
    assert "does not verify" in verify(keys, good, (CODEC.encode(good),
                                                    Signer(n1.kid, impostor.private).headers(CODEC.encode(good)))
                                       ).problem
    value, headers = n1.sign(good)
    doctored = msgspec.structs.replace(good, path="/evil")
    assert "does not verify" in verify(keys, doctored, (CODEC.encode(doctored), headers)).problem
    other_job = ckpt(job="j9")
    assert "a key of job j0, not j9" in verify(keys, other_job, n1.sign(other_job)).problem
    on_stranger = ckpt(node="stranger")  # a copy on a machine of no attempt of this job: never used
    verdict = verify(keys, on_stranger, n1.sign(on_stranger))
    assert verdict.wait and "stranger, which announced no key" in verdict.problem
    admitted(keys, Attempt("j0", 0, "n2"))
    peer_copy = ckpt(node="n2")  # n1's shard backed up in n2's memory: n1 announces it
    assert verify(keys, peer_copy, n1.sign(peer_copy)) == Verdict()
    not_attempt_key = ckpt()
    assert "not an attempt key" in verify(keys, not_attempt_key, (CODEC.encode(not_attempt_key),
                                                                  Signer("n1", n1.private).headers(b"x"))).problem


def test_a_key_for_the_current_attempt_that_its_node_never_announced_is_refused_not_held() -> None:
    keys, n1 = AttemptKeys(), Attempt("j0", 0, "n1", nonce="aa")
    admitted(keys, n1)
    forged = Attempt("j0", 0, "n1", nonce="bb")  # claims n1's attempt 0 with another key id
    record = ckpt()
    verdict = verify(keys, record, forged.sign(record))
    assert not verdict.wait and "not the one node n1 announced" in verdict.problem


def test_a_record_ahead_of_its_key_waits_and_is_handed_back_when_the_key_arrives() -> None:
    keys, n1 = AttemptKeys(), Attempt("j0", 0, "n1")
    record = ckpt()
    signed = n1.sign(record)
    verdict = verify(keys, record, signed)
    assert verdict.wait and "not announced" in verdict.problem
    from trainguard.actions.attempt_keys import Held
    assert keys.hold(Held(record, *signed)) is None
    released = keys.admit(n1.announcement)
    assert [h.record for h in released] == [record]
    assert verify(keys, record, signed) == Verdict()
    assert keys.admit(n1.announcement) == []  # handed back once


def test_held_records_are_bounded_the_oldest_is_pushed_out() -> None:
    from trainguard.actions.attempt_keys import Held
    keys, ghost = AttemptKeys(max_held=2), Attempt("j0", 5, "n1")
    out = [keys.hold(Held(ckpt(step=s), *ghost.sign(ckpt(step=s)))) for s in (1, 2, 3)]
    assert out[:2] == [None, None] and out[2] is not None and out[2].record.step == 1


def test_a_topology_needs_every_node_it_lists_to_have_announced_and_its_signer_among_them() -> None:
    keys, n1, n2 = AttemptKeys(), Attempt("j0", 0, "n1"), Attempt("j0", 0, "n2")
    admitted(keys, n1)
    both = topo("j0", ["n1", "n2"])
    verdict = verify(keys, both, n1.sign(both))
    assert verdict.wait and "n2 announced no key" in verdict.problem
    admitted(keys, n2)
    assert verify(keys, both, n1.sign(both)) == Verdict()
    inflated = topo("j0", ["n1", "n2", *[f"fake{i}" for i in range(998)]])  # the per-job share of 1,000 nodes
    assert verify(keys, inflated, n1.sign(inflated)).wait  # never used: fake nodes announce nothing
    elsewhere = topo("j0", ["n2"])
    assert "does not list" in verify(keys, elsewhere, n1.sign(elsewhere)).problem


def test_a_newer_attempt_forgets_the_old_keys_so_old_records_cannot_be_replayed() -> None:
    keys, old, new = AttemptKeys(), Attempt("j0", 0, "n1"), Attempt("j0", 1, "n1")
    admitted(keys, old)
    replay = ckpt(step=900, path="/ck/old-900")
    signed_then = old.sign(replay)
    assert verify(keys, replay, signed_then) == Verdict()
    assert admitted(keys, new, commanded=(1, ["n1"])) == ""
    verdict = verify(keys, replay, signed_then)
    assert not verdict.wait and "attempt 0; the job is at attempt 1" in verdict.problem
    again = Attempt("j0", 0, "n1", nonce="01")
    assert "older than job j0's current attempt 1" in admitted(keys, again)


def test_a_later_attempt_counts_only_from_the_nodes_acts_restart_went_to() -> None:
    keys = AttemptKeys()
    assert "act never started attempt 3" in admitted(keys, Attempt("j0", 3, "n1"))
    assert "act never started attempt 3" in admitted(keys, Attempt("j0", 3, "n1"), commanded=(2, ["n1"]))
    assert "not sent to node n9" in admitted(keys, Attempt("j0", 3, "n9"), commanded=(3, ["n1", "n2"]))
    assert admitted(keys, Attempt("j0", 3, "n2"), commanded=(3, ["n1", "n2"])) == ""


def test_first_use_ends_with_the_jobs_topology() -> None:
    keys = AttemptKeys()
    assert "not a member of job j0" in admitted(keys, Attempt("j0", 0, "stranger"), members=["n1", "n2"])
    assert admitted(keys, Attempt("j0", 0, "n2"), members=["n1", "n2"]) == ""


def test_an_announcement_whose_id_names_another_job_node_or_attempt_is_refused() -> None:
    keys, real = AttemptKeys(), Attempt("j0", 0, "n1")
    lying = msgspec.structs.replace(real.announcement, job="j1")
    assert "does not name job j1" in keys.key_problem(lying, commanded=None, members=None)
    broken = msgspec.structs.replace(real.announcement, public_key="AAAA")
    assert "public key unusable" in keys.key_problem(broken, commanded=None, members=None)


def test_keys_survive_a_restart_through_the_snapshot() -> None:
    keys, n1 = AttemptKeys(), Attempt("j0", 0, "n1")
    admitted(keys, n1)
    again = AttemptKeys()
    again.restore("j0", keys.snapshot("j0"))
    record = ckpt()
    assert verify(again, record, n1.sign(record)) == Verdict()


# ------------------------------------------------------------ act's edge


def _core(tmp_path: Path, *, spares: list[str] | None = None, trusted: bool = False,
          ) -> tuple[ActCore, list[Record], Path]:
    node_dir = tmp_path / "nodes"
    for n in range(8):
        if not (node_dir / f"j0n{n}.key").exists():
            generate(node_dir, f"j0n{n}")
    for spare in spares or []:
        if not (node_dir / f"{spare}.key").exists():
            generate(node_dir, spare)
    eng, runner, audit = build(tmp_path, Scripted(), spares=spares)
    core = ActCore(engine=eng, runner=runner, knowledge=JobKnowledge(runner.journal, eng, eng.checkpoints),
                   publish=audit.append, node_keys=load_ring([node_dir]), job_records_trusted=trusted)
    return core, audit, node_dir


def _edge(core: ActCore, record: Record, value: bytes, headers: list[tuple[str, bytes]]) -> bool:
    """What the loop does with a state record: trust it, then observe it."""
    trusted = core.trusts(record, value, headers, topic="t", offset=1)
    if trusted:
        core.observe(record)
    return trusted


def _announce(core: ActCore, node_dir: Path, attempt: Attempt, signer_node: str = "") -> bool:
    value = CODEC.encode(attempt.announcement)
    node = signer_node or attempt.announcement.node
    return _edge(core, attempt.announcement, value, load_signer(node_dir / f"{node}.key", node).headers(value))


def test_act_uses_a_checkpoint_only_when_the_current_attempt_signed_it(tmp_path: Path) -> None:
    core, audit, node_dir = _core(tmp_path)
    try:
        forged = ckpt(step=999, path="/forged/999")
        assert not _edge(core, forged, CODEC.encode(forged), [])
        rejected, = events(audit, "checkpoint_rejected")
        assert rejected.detail["path"] == "/forged/999" and "unsigned" in rejected.detail["reason"]
        assert core.knowledge.checkpoints.latest("j0").step == 100  # type: ignore[union-attr]

        n1 = Attempt("j0", 0, "j0n1")
        as_n2 = Attempt("j0", 0, "j0n1", nonce="n2")
        assert not _announce(core, node_dir, as_n2, signer_node="j0n2")  # j0n2 announcing for j0n1
        assert "not node 'j0n1'" in events(audit, "attempt_key_rejected")[0].detail["reason"]
        genuine = ckpt(step=300, path="/ck/300", node="j0n1")
        assert not _edge(core, genuine, *n1.sign(genuine))  # ahead of its key: held, audited, not used
        assert events(audit, "checkpoint_held") and core.knowledge.checkpoints.latest("j0").step == 100  # type: ignore[union-attr]
        assert _announce(core, node_dir, n1)
        assert core.knowledge.checkpoints.latest("j0").step == 300  # type: ignore[union-attr]
        assert events(audit, "attempt_key_accepted")[0].detail["trust"] == "first use"
    finally:
        core.close()


def test_a_restart_moves_the_keys_to_the_nodes_it_went_to_and_a_restarted_act_remembers(tmp_path: Path) -> None:
    core, audit, node_dir = _core(tmp_path, spares=["s0"])
    old = Attempt("j0", 0, "j0n0")
    assert _announce(core, node_dir, old)
    core.decide(hw("j0", "j0n1"))  # evict j0n1, swap in s0, restart as attempt 1
    core.close()
    attempt, nodes = core.runner.last_restart("j0") or (0, [])
    assert attempt == 1 and "s0" in nodes and "j0n1" not in nodes
    core.runner.journal.close()

    again, audit2, _ = _core(tmp_path, spares=["s0"])  # a restarted act: keys and restarts from the journal
    try:
        assert not _announce(again, node_dir, Attempt("j0", 1, "j0n1"))  # evicted: not sent the restart
        assert "not sent to node j0n1" in events(audit2, "attempt_key_rejected")[0].detail["reason"]
        spare = Attempt("j0", 1, "s0")
        assert _announce(again, node_dir, spare)
        replay = ckpt(step=5000, path="/ck/attempt0-5000")
        assert not _edge(again, replay, *old.sign(replay))  # attempt 0's key: forgotten
        assert "attempt 0; the job is at attempt 1" in events(audit2, "checkpoint_rejected")[0].detail["reason"]
        fresh = ckpt(step=400, path="/ck/400", node="s0")
        assert _edge(again, fresh, *spare.sign(fresh))
    finally:
        again.close()


def test_trusting_job_records_by_acl_is_an_explicit_choice(tmp_path: Path) -> None:
    core, audit, _ = _core(tmp_path, trusted=True)
    try:
        record = topo("j0", ["x1", "x2"])
        assert _edge(core, record, CODEC.encode(record), [])
        assert not events(audit, "topology_rejected")
    finally:
        core.close()


def test_agents_ahead_of_act_are_refused_and_acts_next_restart_goes_beyond_them(tmp_path: Path) -> None:
    """An operator's hot update act did not send moved the agents to attempt 5: their keys are refused
    (act never started it), and act's next restart must be attempt 6, which they adopt and act believes
    (found by the demo: a restart to attempt 5 would have left the agents at 6, unverifiable)."""
    core, audit, node_dir = _core(tmp_path, spares=["s0"])
    try:
        assert not _announce(core, node_dir, Attempt("j0", 5, "j0n0"))
        assert "act never started attempt 5" in events(audit, "attempt_key_rejected")[0].detail["reason"]
        core.decide(hw("j0", "j0n1"))
        core.close()
        attempt, nodes = core.runner.last_restart("j0") or (0, [])
        assert attempt == 6 and "j0n0" in nodes
        assert _announce(core, node_dir, Attempt("j0", 6, "j0n0"))
    finally:
        core.close()
