"""Fixtures for the action tests: the fake Kubernetes API server (see tests/fake_kube_api.py: a fake at the HTTP boundary)."""

from __future__ import annotations

from typing import Any

import pytest
from fake_kube_api import FakeKube, pod


@pytest.fixture
def fake_kube() -> Any:
    """`fake_kube(nodes, pods)` -> a running `FakeKube` (use as a context manager)."""
    return FakeKube


@pytest.fixture
def kube_pod() -> Any:
    """`kube_pod(name, node, daemonset=False, mirror=False, phase=...)` -> a Pod object."""
    return pod
