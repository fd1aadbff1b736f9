"""The GPU tier: NVML, the training hook and the checkpoint on a real NVIDIA device.

These tests need what nothing here can fake: a CUDA device and its driver.
Where there is none they are not run; pytest's summary says how many were
deselected and why (a deselected test is not a passing one). On a machine
with a GPU they run with the rest of `make test`, or alone:
`pytest -m gpu tests/gpu`.
"""

from __future__ import annotations

import pytest


def _no_device() -> str:
    """Why the GPU tier cannot run here; "" when it can."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device (torch.cuda.is_available() is False)"
    return ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    why = _no_device() if gpu else ""
    if not why:
        return
    config.hook.pytest_deselected(items=gpu)
    items[:] = [item for item in items if item.get_closest_marker("gpu") is None]
    config.stash[_NOTE] = f"gpu tier: {len(gpu)} tests not run: {why}"


_NOTE = pytest.StashKey[str]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    note = config.stash.get(_NOTE, "")
    if note:
        terminalreporter.write_line(note)
