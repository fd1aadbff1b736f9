"""A collector that publishes training steps of two jobs at a fixed rate until it is killed.

It prints `accepted <job> <step>` only after `publish()` returned: the test
holds the publisher to every record printed here.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from trainguard.collectors.publisher import Publisher
from trainguard.schemas.records import TrainingStep
from trainguard.schemas.topics import Topics


def main(servers: str, prefix: str, spool: str, rate: float) -> None:
    pub = Publisher(servers=servers, topics=Topics(prefix), spool_dir=Path(spool), send_timeout_s=4.0,
                    retry_backoff_s=0.5, linger_s=0.1)
    step = 0
    while True:
        for job in ("ja", "jb"):
            pub.publish(TrainingStep(ts=1.0 + step, job=job, rank=0, node="n0", step=step, loss=1.0))
            print(f"accepted {job} {step}", flush=True)
        step += 1
        time.sleep(1.0 / rate)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
