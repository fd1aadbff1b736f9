"""What signing costs: Ed25519 over a command's bytes, against encoding (and decoding) it alone.

Commands and results are few (a handful per incident), so this is not a
throughput bound; it shows that signing every command, every agent record
and (where ACLs are unavailable) every incident costs microseconds. Baseline:
`Codec.encode` / `Codec.decode` of the same command, measured in the same run.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from benchmarks.bench_codec import rate
from trainguard.schemas.action_params import Restart
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import ActionCommand
from trainguard.schemas.signing import KeyRing, Signer


def main(argv: Sequence[str] | None = None) -> int:
    seconds = float((argv or sys.argv[1:] or ["1.0"])[0])
    codec = Codec()
    signer = Signer("act", Ed25519PrivateKey.generate())
    ring = KeyRing({"act": signer.private_key.public_key()})
    command = ActionCommand(ts=1_764_000_000.0, expires=1_764_000_120.0, id="inc-1-0-" + "f" * 32,
                            action="restart_from_checkpoint", job="llm-pretrain-7", nodes=["node-0417"],
                            params=Restart(step=12000, path="/ckpt/step12000", attempt=3))
    payload = codec.encode(command)
    headers = signer.headers(payload)
    encode = rate(lambda: codec.encode(command), seconds)
    encode_sign = rate(lambda: signer.headers(codec.encode(command)), seconds)
    decode = rate(lambda: codec.decode(payload, ActionCommand), seconds)
    verify_decode = rate(lambda: (ring.check(payload, headers), codec.decode(payload, ActionCommand)), seconds)
    print(f"command of {len(payload)} bytes; load {os.getloadavg()[0]:.1f}")
    print(f"encode {1e6 / encode:7.2f} us   encode+sign   {1e6 / encode_sign:7.2f} us   "
          f"(x{encode / encode_sign:.0f} the baseline's time)")
    print(f"decode {1e6 / decode:7.2f} us   verify+decode {1e6 / verify_decode:7.2f} us   "
          f"(x{decode / verify_decode:.0f} the baseline's time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
