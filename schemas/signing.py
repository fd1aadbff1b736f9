"""Ed25519 signatures over the exact bytes of a Kafka message.

Why Ed25519 and not the old shared HMAC key: with a symmetric key every
verifier can also sign, so any node (or a compromised training pod) could
forge a fleet-wide eviction. Here each signer holds its own private key and
verifiers hold only public keys: `act` signs commands, every node agent signs
its results with its node key, the worker may sign incidents. HMAC is gone:
nothing needs a shared secret that a public key cannot do.

Sign-then-encode: the signature is *detached*, carried in the message's Kafka
headers (`tg-kid`, `tg-sig`), and covers the value bytes exactly as sent. A
verifier never re-encodes a record, so any producer, in any language, that
sends the same bytes verifies (an integer `ts` is as good as a float).

Key ids name keys, which is how keys rotate: a `KeyRing` accepts every public
key it was given, so a new act key is rolled out to the agents first, then
used. A node key's id is the node's name, so `act` can tell that a result
claiming to come from node n1 was signed by n1 and by no other node.
"""

from __future__ import annotations

import base64
import os
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from trainguard.schemas.records import ActionCommand, OperatorCommand

KID_HEADER = "tg-kid"
SIG_HEADER = "tg-sig"
Headers = list[tuple[str, bytes]]


class KeyFileError(ValueError):
    """A key file is missing or is not an Ed25519 key; the message names the file."""


@dataclass(frozen=True)
class Signer:
    """A private key and its id; signs payload bytes into Kafka headers."""

    key_id: str
    private_key: Ed25519PrivateKey = field(repr=False)  # never printed, never logged

    def headers(self, payload: bytes) -> Headers:
        """The detached signature of `payload`, as Kafka headers.

        >>> s = Signer("act", Ed25519PrivateKey.generate())
        >>> ring = KeyRing({"act": s.private_key.public_key()})
        >>> ring.check(b'{"ts":1}', s.headers(b'{"ts":1}')), ring.check(b'{"ts":2}', s.headers(b'{"ts":1}'))[1]
        (('act', ''), 'signature does not verify with key act')
        """
        return [(KID_HEADER, self.key_id.encode()), (SIG_HEADER, self.private_key.sign(payload))]


@dataclass(frozen=True)
class KeyRing:
    """The public keys a verifier accepts, by key id (several during a rotation)."""

    keys: dict[str, Ed25519PublicKey] = field(default_factory=dict, repr=False)

    def __bool__(self) -> bool:
        return bool(self.keys)

    def check(self, payload: bytes, headers: Sequence[tuple[str, bytes]] | None) -> tuple[str, str]:
        """(key id, problem); the problem is "" when `payload` is signed by a key of this ring."""
        found = dict(headers or [])
        kid_raw, sig = found.get(KID_HEADER), found.get(SIG_HEADER)
        if not kid_raw or not sig:
            return "", "unsigned (no tg-kid/tg-sig headers)"
        kid = kid_raw.decode(errors="replace")
        key = self.keys.get(kid)
        if key is None:
            return kid, f"unknown key id {kid!r}"
        try:
            key.verify(sig, payload)
        except InvalidSignature:
            return kid, f"signature does not verify with key {kid}"
        return kid, ""


@dataclass(frozen=True)
class Received:
    """A decoded command with the exact bytes and headers it arrived with, for the agent to verify."""

    command: ActionCommand
    payload: bytes
    headers: Headers


def signed_by_node(ring: KeyRing, payload: bytes, headers: Sequence[tuple[str, bytes]] | None, node: str) -> str:
    """Why a result claiming to come from `node` is not trusted ("" if it is).

    Node keys are named after their node (`n1`, or `n1@2027` during a
    rotation), so one node's key cannot vouch for another node's result.
    """
    kid, problem = ring.check(payload, headers)
    if problem:
        return problem
    if not node or kid.split("@")[0] != node:
        return f"signed with key {kid!r}, which is not node {node!r}'s"
    return ""


def new_command_id(prefix: str) -> str:
    """A command id nobody can predict (128 random bits), so a result cannot be forged in advance."""
    return f"{prefix}-{secrets.token_hex(16)}"


def command_problem(cmd: ActionCommand | OperatorCommand, *, now: float, seen: Iterable[str] | set[str],
                    max_skew_s: float) -> str:
    """Why a correctly signed command must still not run ("" if it may).

    Expired (or issued in the future beyond the clock skew), without an
    expiry, or an id already carried out: a replay of a captured command.
    The same rules hold for act's commands and the console's operator commands.
    """
    if cmd.expires <= 0:
        return "command carries no expiry"
    if now > cmd.expires + max_skew_s:
        return f"expired {now - cmd.expires:.0f}s ago"
    if cmd.ts > now + max_skew_s:
        return f"issued {cmd.ts - now:.0f}s in the future"
    if cmd.id in seen:
        return "replayed command id"
    return ""


def attempt_key_id(job: str, attempt: int, node: str, nonce: str) -> str:
    """The id of the key one attempt of `job` signs with on `node`: `<job>/<attempt>/<node>/<nonce>`.

    Job and node are percent-encoded, so a name holding a `/` cannot make one id read as another.

    >>> attempt_key_id("llm", 3, "gpu/7", "9f2c")
    'llm/3/gpu%2F7/9f2c'
    >>> parse_key_id(attempt_key_id("llm", 3, "gpu/7", "9f2c")), parse_key_id("n1")
    (('llm', 3, 'gpu/7'), None)
    """
    return f"{quote(job, safe='')}/{attempt}/{quote(node, safe='')}/{nonce}"


def parse_key_id(kid: str) -> tuple[str, int, str] | None:
    """(job, attempt, node) of an attempt key id; None if `kid` is none."""
    parts = kid.split("/")
    if len(parts) != 4 or not parts[1].isdigit() or not all(parts):
        return None
    return unquote(parts[0]), int(parts[1]), unquote(parts[2])


# ------------------------------------------------------------------ key files


def generate(directory: Path, key_id: str) -> tuple[Path, Path]:
    """Write `<key_id>.key` (PKCS#8 PEM, mode 0600) and `<key_id>.pub`; refuse to overwrite."""
    directory.mkdir(parents=True, exist_ok=True)
    private, public = directory / f"{key_id}.key", directory / f"{key_id}.pub"
    for path in (private, public):
        if path.exists():
            raise KeyFileError(f"{path}: exists; remove it first to replace the key")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    private.touch(mode=0o600)
    private.write_bytes(pem)
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def write_private_key(path: Path, key: Ed25519PrivateKey) -> None:
    """Write `key` (PKCS#8 PEM) to a new file created mode 0600: never readable by others, not even briefly."""
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)


def public_b64(key: Ed25519PublicKey) -> str:
    """The raw 32 bytes of a public key, base64 (how a record carries it).

    >>> k = Ed25519PrivateKey.generate().public_key()
    >>> public_from_b64(public_b64(k)) == k
    True
    """
    return base64.b64encode(key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)).decode()


def public_from_b64(text: str) -> Ed25519PublicKey:
    """The public key `public_b64` wrote; ValueError for anything else."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not base64 ({exc})") from None
    if len(raw) != 32:
        raise ValueError(f"an Ed25519 public key has 32 bytes, not {len(raw)}")
    return Ed25519PublicKey.from_public_bytes(raw)


def load_signer(path: Path, key_id: str = "") -> Signer:
    """The private key at `path`; its id is `key_id` or the file's stem."""
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"{path}: cannot read private key ({type(exc).__name__})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{path}: not an Ed25519 private key")
    return Signer(key_id or path.stem, key)


def load_ring(paths: Iterable[Path]) -> KeyRing:
    """Public keys from files (`<kid>.pub`) or directories of them."""
    keys: dict[str, Ed25519PublicKey] = {}
    for path in paths:
        for file in sorted(path.glob("*.pub")) if path.is_dir() else [path]:
            try:
                key = serialization.load_pem_public_key(file.read_bytes())
            except (OSError, ValueError) as exc:
                raise KeyFileError(f"{file}: cannot read public key ({type(exc).__name__})") from None
            if not isinstance(key, Ed25519PublicKey):
                raise KeyFileError(f"{file}: not an Ed25519 public key")
            keys[file.stem] = key
    return KeyRing(keys)


def fingerprint(key: Ed25519PublicKey) -> str:
    """A short printable fingerprint of a public key (for `keys generate` output and audit)."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b32encode(raw).decode()[:16].lower()
