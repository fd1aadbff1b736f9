"""What act's core reports as it works, as a protocol, and the default that reports nothing.

`streams.act.metrics.ActionMetrics` implements it for Prometheus; the pure
core (`actions.core`) only knows this protocol, so actions/ imports no
streams/ and no exporter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol


class ActMetrics(Protocol):
    """What the core reports as it works; `streams.act.metrics.ActionMetrics` exports it to Prometheus.

    A protocol, so the pure core never imports an exporter (actions/ imports no streams/).
    """

    def decided(self, *, kind: str, rule: str, status: str) -> None: ...

    def acted(self, *, action: str, status: str) -> None: ...

    def rails(self, *, breaker_tripped: bool, pool_size: int) -> None: ...

    def ettr(self, *, job: str, ettr: float, unproductive_s: dict[str, float]) -> None: ...

    def evictions(self, counts: dict[str, int]) -> None: ...

    def rollout(self, kinds: Mapping[str, str], rules: Mapping[str, str]) -> None: ...

    def lemons(self, count: int) -> None: ...

    def precision(self, shown: Mapping[str, Mapping[str, Mapping[str, object]]], low: Sequence[str]) -> None: ...


class NoMetrics:
    """The default `ActMetrics`: counts nothing (tests, tools, a core without an exporter)."""

    def decided(self, *, kind: str, rule: str, status: str) -> None:
        """Count nothing."""

    def acted(self, *, action: str, status: str) -> None:
        """Count nothing."""

    def rails(self, *, breaker_tripped: bool, pool_size: int) -> None:
        """Show nothing."""

    def ettr(self, *, job: str, ettr: float, unproductive_s: dict[str, float]) -> None:
        """Show nothing."""

    def evictions(self, counts: dict[str, int]) -> None:
        """Show nothing."""

    def rollout(self, kinds: Mapping[str, str], rules: Mapping[str, str]) -> None:
        """Show nothing."""

    def lemons(self, count: int) -> None:
        """Show nothing."""

    def precision(self, shown: Mapping[str, Mapping[str, Mapping[str, object]]], low: Sequence[str]) -> None:
        """Show nothing."""
