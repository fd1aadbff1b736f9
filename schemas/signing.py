"""HMAC signatures for action commands.

A command that can evict a node must come from the decision engine, not
from whoever can write to the topic. The signature is an HMAC-SHA256 over
the command's canonical JSON with the `signature` field emptied; both the
signer (actions) and the verifiers (executors, node agents) use this module,
which is why it lives in `schemas`, the one package they all share.
"""

from __future__ import annotations

import hashlib
import hmac

import msgspec

from schemas.records import ActionCommand

_ENCODER = msgspec.json.Encoder(order="sorted")


def _payload(command: ActionCommand) -> bytes:
    return _ENCODER.encode(msgspec.structs.replace(command, signature=""))


def sign(command: ActionCommand, key: bytes) -> ActionCommand:
    """Return the command with its `signature` set.

    >>> c = sign(ActionCommand(ts=1.0, id="c1", action="stop"), b"k")
    >>> verify(c, b"k"), verify(c, b"other")
    (True, False)
    """
    digest = hmac.new(key, _payload(command), hashlib.sha256).hexdigest()
    return msgspec.structs.replace(command, signature=digest)


def verify(command: ActionCommand, key: bytes) -> bool:
    """True when the signature matches the command's content under `key`."""
    if not command.signature:
        return False
    expected = hmac.new(key, _payload(command), hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, command.signature)
