"""A stand-in training process that takes `STOP_S` seconds to stop (a job saving state on SIGTERM)."""

from __future__ import annotations

import os
import signal
import sys
import time
from types import FrameType


def _term(_sig: int, _frame: FrameType | None) -> None:
    time.sleep(float(os.environ.get("STOP_S", "4")))
    sys.exit(0)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _term)
    print("training", flush=True)
    while True:
        time.sleep(0.2)
