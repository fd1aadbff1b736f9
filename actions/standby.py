"""The warm-standby pool: pre-checked spare nodes that replace evicted ones.

A restart that has to wait for the scheduler to find a node loses minutes;
swapping in a spare that already passed a self-check loses seconds. A
repaired node goes back into the pool only with a passing self-check, never
on someone's word, so the pool never hands out a node that is still sick.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class PoolExhausted(LookupError):
    """No spare node is left."""


@dataclass
class StandbyPool:
    """A FIFO of ready spares plus where each taken spare went.

    >>> pool = StandbyPool(spares=["s0"])
    >>> pool.take(replacing="n3"), pool.size
    ('s0', 0)
    >>> pool.exhausted
    True
    >>> pool.return_node("n3", self_check_passed=False)
    False
    >>> pool.return_node("n3", self_check_passed=True), pool.size
    (True, 1)
    """

    spares: list[str] = field(default_factory=list)
    swaps: dict[str, str] = field(default_factory=dict)  # spare -> node it replaced

    @property
    def size(self) -> int:
        """How many spares are ready now."""
        return len(self.spares)

    @property
    def exhausted(self) -> bool:
        """True when an eviction would find no spare."""
        return not self.spares

    def take(self, *, replacing: str) -> str:
        """Hand out the oldest ready spare for `replacing`; raise if none."""
        if not self.spares:
            raise PoolExhausted(f"standby pool exhausted; {replacing} is not replaced")
        spare = self.spares.pop(0)
        self.swaps[spare] = replacing
        return spare

    def return_node(self, node: str, *, self_check_passed: bool) -> bool:
        """Put a repaired node back, only if its self-check passed."""
        if not self_check_passed or node in self.spares:
            return False
        self.spares.append(node)
        return True

    def snapshot(self) -> dict[str, object]:
        """Plain state for the journal."""
        return {"spares": list(self.spares), "swaps": dict(self.swaps)}

    def restore(self, state: dict[str, object]) -> None:
        """Inverse of `snapshot`."""
        spares = state.get("spares", [])
        swaps = state.get("swaps", {})
        self.spares = [str(s) for s in spares] if isinstance(spares, list) else []
        self.swaps = {str(k): str(v) for k, v in swaps.items()} if isinstance(swaps, dict) else {}
