"""The `security:` section: which signing keys each role holds and accepts.

One section for every process, because one config file usually serves a
whole fleet: `act` reads `act_private_key` (signs commands) and
`node_public_keys` (verifies results); an agent reads `node_private_key`
(signs its results) and `act_public_keys` (verifies commands); the worker
reads `worker_private_key` when incidents must be signed; the console reads
`console_private_key` (signs operator commands) and act `console_public_keys`. Only paths live
here: the keys themselves are files (a Kubernetes Secret mounted read-only),
never YAML, never environment values, never logged. There is no default
key: a role whose key is missing refuses to start and says how to make one.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from trainguard.schemas.signing import KeyFileError, KeyRing, Signer, load_ring, load_signer

HOW_TO_MAKE = "make keys with `trainguard keys generate --dir DIR` and set the security: paths it prints"


class SecuritySettings(BaseModel):
    """Paths of the Ed25519 keys; `{node}` in `node_private_key` is replaced by the node's name."""

    model_config = ConfigDict(extra="forbid")

    act_private_key: Path | None = Field(None, description="act's key that signs commands (act only)")
    act_public_keys: list[Path] = Field(default_factory=list,
                                        description="files or directories of act public keys agents accept")
    node_private_key: Path | None = Field(None, description="this node's key that signs its results; "
                                          "'{node}' is replaced by the node name")
    node_public_keys: list[Path] = Field(default_factory=list,
                                         description="node public keys act accepts results from (id = node name)")
    worker_private_key: Path | None = Field(None, description="the worker signs incidents with it when set")
    worker_public_keys: list[Path] = Field(default_factory=list,
                                           description="act acts only on incidents signed by these; a non-dry-run "
                                           "act refuses to start without them unless incidents_trusted_by_acl")
    incidents_trusted_by_acl: bool = Field(False, description="with no worker_public_keys, act acts on ANY record "
                                           "on the incidents topic: only Kafka ACLs stop a forger (act warns)")
    job_records_trusted_by_acl: bool = Field(False, description="act uses checkpoint and topology records nobody "
                                             "signed (jobs not run under `trainguard run`): any writer of the "
                                             "checkpoints/training topics can then announce them for any job "
                                             "(act warns)")
    console_private_key: Path | None = Field(None, description="the console's key that signs operator commands "
                                             "(console only)")
    console_public_keys: list[Path] = Field(default_factory=list,
                                            description="console public keys act accepts operator commands from; "
                                            "empty: act refuses every operator command")
    command_ttl_s: float = Field(120.0, gt=0, description="a command expires this long after it is issued")
    max_clock_skew_s: float = Field(30.0, ge=0, description="clock difference tolerated between act and nodes")

    def signer(self, role: str, node: str = "") -> Signer:
        """The private key of `role` ('act', 'node', 'worker', 'console'); KeyFileError (one line) if not configured."""
        path = getattr(self, f"{role}_private_key")
        if path is None:
            raise KeyFileError(f"no signing key: security.{role}_private_key is not set; {HOW_TO_MAKE}")
        path = Path(str(path).replace("{node}", node))
        if not path.is_file():
            raise KeyFileError(f"security.{role}_private_key: {path} not found; {HOW_TO_MAKE}")
        return load_signer(path, key_id=node if role == "node" else "")

    def ring(self, role: str) -> KeyRing:
        """The public keys of `role` that this process accepts; empty when none are configured."""
        paths: list[Path] = getattr(self, f"{role}_public_keys")
        for path in paths:
            if not path.exists():
                raise KeyFileError(f"security.{role}_public_keys: {path} not found; {HOW_TO_MAKE}")
        return load_ring(paths)

    def incident_ring(self) -> KeyRing:
        """The worker keys act checks incidents with; empty only when `incidents_trusted_by_acl` says so.

        Out of the box act acts only on incidents the worker signed: trusting whoever may write the
        incidents topic is an explicit choice, which act names in a warning.
        """
        ring = self.ring("worker")
        if not ring and not self.incidents_trusted_by_acl:
            raise KeyFileError("no worker key: security.worker_public_keys is empty, and act acts only on "
                               f"incidents the worker signed; {HOW_TO_MAKE} (or set "
                               "security.incidents_trusted_by_acl: true where Kafka ACLs alone guard incidents)")
        return ring

    def required_ring(self, role: str) -> KeyRing:
        """Like `ring`, but refuses an empty one (a verifier that accepts nothing would reject everything)."""
        ring = self.ring(role)
        if not ring:
            raise KeyFileError(f"no public keys: security.{role}_public_keys is empty; {HOW_TO_MAKE}")
        return ring
