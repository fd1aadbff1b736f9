"""trainguard: keep large GPU training jobs productive.

`import trainguard` is what a training job imports: the training hook
(`trainguard.TrainingMonitor`, lazily, so importing this package has no
side effects and does not import torch or Kafka), where a process sits in
the job (`trainguard.topology`) and the checkpoint library
(`trainguard.checkpoint`). The command line lives in its own room,
`trainguard.cli`; the settings tree in `trainguard.settings`.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in {"TrainingMonitor", "monitor"}:
        from trainguard import training_hook

        return getattr(training_hook, name)
    raise AttributeError(f"module 'trainguard' has no attribute {name!r}")
