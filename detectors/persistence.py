"""Persistence before eviction: a fail-slow is evicted on only when it lasts or keeps coming back.

Links and GPUs fail slow for anything from under a minute to hours
(Alibaba's GREYHOUND, ATC'25: most episodes are short and recover on their
own). Evicting a node of a large job costs the whole job a restart, so a
short episode is *noted* (a transient anomaly, counted against its node)
and only an episode that lasts `persist_s` (default 120 s), or the
`recur_n`-th episode of one node within `recur_window_s`, is reported as a
fault to act on. The episode's duration and the node's recent episodes go
into the evidence, so whoever reads the incident sees the history.

An episode is one key (a port, a job's slowdown) seen bad; it ends when the
key is seen healthy `gap_s` after its last bad sighting (a burst with a
quiet sample in the middle is one episode), or is forgotten when it has not
been seen bad for `persist_s` with no healthy sighting either (an idle link
says nothing either way).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Any

from trainguard.detectors.common import Bounded

TRANSIENT = "transient"
PERSISTENT = "persistent"
RECURRING = "recurring"


class Persistence:
    """Episodes per key and transient counts per node; says when an episode deserves an incident.

    >>> p = Persistence(persist_s=120, recur_n=3, recur_window_s=3600, gap_s=30)
    >>> p.bad("port", "n1", 0.0), p.bad("port", "n1", 60.0), p.bad("port", "n1", 130.0)
    (None, None, 'persistent')
    >>> q = Persistence(persist_s=120, recur_n=2, recur_window_s=3600, gap_s=30)
    >>> q.bad("port", "n1", 0.0), q.good("port", "n1", 50.0)["duration_s"], q.bad("port", "n1", 500.0)
    (None, 0.0, None)
    >>> q.bad("port", "n1", 510.0)  # the second sighting of the node's second episode within the hour
    'recurring'
    """

    def __init__(self, *, persist_s: float = 120.0, recur_n: int = 3, recur_window_s: float = 3600.0,
                 gap_s: float = 30.0, max_keys: int = 100_000) -> None:
        self.persist_s = persist_s
        self.recur_n = recur_n
        self.recur_window_s = recur_window_s
        self.gap_s = gap_s
        self._episodes: Bounded[Hashable, list[float]] = Bounded(max_keys)  # key -> [start, last_bad, n, escalated]
        self._history: Bounded[str, deque[tuple[float, float]]] = Bounded(max_keys)  # node -> (start, duration)

    def is_open(self, key: Hashable) -> bool:
        """Whether `key` has an episode under way (a healthy sighting of a key without one changes nothing)."""
        return key in self._episodes

    def any_open(self) -> bool:
        """Whether any key has an episode under way (when none has, no key needs asking)."""
        return bool(self._episodes)

    def bad(self, key: Hashable, node: str, ts: float) -> str | None:
        """Note `key` bad at `ts`; PERSISTENT or RECURRING the one time its episode deserves an incident."""
        ep = self._episodes.get(key)
        if ep is None or ts - ep[1] > max(self.gap_s, self.persist_s):
            self._episodes[key] = ep = [ts, ts, 0.0, 0.0]
        ep[1] = max(ep[1], ts)
        ep[2] += 1
        if ep[3]:
            return None
        if ts - ep[0] >= self.persist_s:
            ep[3] = 1.0
            return PERSISTENT
        if ep[2] >= 2 and self.recurrences(node, ts) >= self.recur_n - 1:
            ep[3] = 1.0
            return RECURRING
        return None

    def good(self, key: Hashable, node: str, ts: float, *, min_sightings: int = 1) -> dict[str, Any] | None:
        """Note `key` healthy at `ts`; the transient's summary when a never-escalated episode ends here."""
        ep = self._episodes.get(key)
        if ep is None or ts - ep[1] < self.gap_s:
            return None
        del self._episodes[key]
        if ep[3] or ep[2] < min_sightings:
            return None
        return self.transient(node, ep[0], ep[1] - ep[0], ts)

    def transient(self, node: str, start: float, duration: float, ts: float) -> dict[str, Any]:
        """Count one transient episode of `node`; its summary (the evidence of a transient anomaly)."""
        seen = self._history.get(node)
        if seen is None:
            self._history[node] = seen = deque(maxlen=max(8, self.recur_n * 2))
        seen.append((start, duration))
        return {"persistence": TRANSIENT, "start": start, "duration_s": round(duration, 3),
                "node_transients": self.recurrences(node, ts), "history": self.history(node)}

    def onset(self, key: Hashable) -> float | None:
        """When the open episode of `key` began."""
        ep = self._episodes.get(key)
        return ep[0] if ep is not None else None

    def duration(self, key: Hashable, ts: float) -> float:
        ep = self._episodes.get(key)
        return ts - ep[0] if ep is not None else 0.0

    def recurrences(self, node: str, ts: float) -> int:
        """Transients of `node` that began within `recur_window_s` before `ts`."""
        return sum(1 for start, _ in self._history.get(node, ()) if ts - start <= self.recur_window_s)

    def history(self, node: str) -> list[list[float]]:
        """The node's recent transients, [start, duration] each, oldest first."""
        return [[round(s, 3), round(d, 3)] for s, d in self._history.get(node, ())]

    def evidence(self, key: Hashable, node: str, ts: float, verdict: str) -> dict[str, Any]:
        """What an escalated episode's incident carries: why now, how long, and the node's history."""
        return {"persistence": verdict, "duration_s": round(self.duration(key, ts), 3),
                "node_transients": self.recurrences(node, ts), "history": self.history(node)}

    def size(self) -> int:
        return len(self._episodes) + sum(len(h) for h in self._history.values())
