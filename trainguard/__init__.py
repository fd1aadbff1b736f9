"""trainguard: keep large GPU training jobs productive.

The command line lives in `trainguard.cli`. The training hook is exposed
lazily as `trainguard.TrainingMonitor`, so importing this package has no
side effects and does not import torch or Kafka.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in {"TrainingMonitor", "monitor"}:
        from collectors import training_hook

        return getattr(training_hook, name)
    raise AttributeError(f"module 'trainguard' has no attribute {name!r}")
