"""Where collectors put records: one protocol, two refinements.

`collectors.publisher.Publisher` satisfies all three; tests pass a list. The
node loop also reports the publisher's spool counts, and the training hook
flushes it on exit, so each asks only for what it uses.
"""

from __future__ import annotations

from typing import Protocol

from trainguard.schemas.records import Record


class RecordSink(Protocol):
    """Takes records to publish (the agent's only need)."""

    def publish(self, record: Record) -> None: ...


class CountingSink(RecordSink, Protocol):
    """A sink that also says what it has spooled and sent (the node loop's metrics)."""

    def stats(self) -> dict[str, int]: ...


class ClosingSink(RecordSink, Protocol):
    """A sink that flushes on close (the training hook's exit)."""

    def close(self, timeout_s: float = 10.0) -> bool: ...
