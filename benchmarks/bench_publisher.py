"""Publisher throughput with the write-ahead spool, against an encode-only baseline.

Three loops over the same records (training steps), in one run:

* baseline: encode only (msgspec), what any publisher must pay;
* `publish()` with write-ahead, `sync="process"` (the default) and
  `sync="always"` (fsync per record): the caller-side cost per record, and
  end-to-end throughput until every record is acknowledged by the broker.

Prints figures; asserts nothing. Needs a broker (`--servers`).

    python -m benchmarks publisher [--records 20000] [--servers HOST:PORT]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from trainguard.collectors.publisher import Publisher
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import TrainingStep
from trainguard.schemas.topics import Topics


def records(n: int) -> list[TrainingStep]:
    return [TrainingStep(ts=1.0 + i, job=f"j{i % 8}", rank=i % 64, node=f"n{i % 8}", step=i, loss=1.0,
                         step_time_s=0.1) for i in range(n)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_publisher")
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--servers", default=os.environ.get("TRAINGUARD_BENCH_SERVERS", "127.0.0.1:9092"))
    args = parser.parse_args(list(argv or []))
    recs = records(args.records)
    codec = Codec()
    t0 = time.perf_counter()
    for r in recs:
        codec.encode(r)
    base = (time.perf_counter() - t0) / len(recs)
    print(f"publisher, {len(recs)} training steps; load {os.getloadavg()[0]:.2f}")
    print(f"  baseline encode only      {base * 1e6:7.2f} us/record")
    for sync, n in (("process", len(recs)), ("always", min(len(recs), 2000))):
        with tempfile.TemporaryDirectory() as spool:
            pub = Publisher(servers=args.servers, topics=Topics(f"bench-{uuid.uuid4().hex[:6]}."),
                            spool_dir=Path(spool), linger_s=0.05, sync=sync)
            t0 = time.perf_counter()
            for r in recs[:n]:
                pub.publish(r)
            accepted = time.perf_counter() - t0
            ok = pub.close(timeout_s=120)
            total = time.perf_counter() - t0
        per = accepted / n
        print(f"  publish() wal={sync:7s}    {per * 1e6:7.2f} us/record = {per / base:5.1f}x encode; "
              f"accepted {n / accepted:8.0f}/s, delivered {n / total:8.0f}/s end to end"
              f"{'' if ok else ' (NOT all delivered)'}")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
