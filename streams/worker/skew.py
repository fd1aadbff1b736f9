"""Each host's clock offset, estimated online from its records; a `clock_skew` finding past the bound.

A record carries two times: `ts`, stamped by the host that observed it, and
the Kafka message's timestamp, stamped by the broker (LogAppendTime) or by
the producer that sent it (CreateTime). Their difference is the host's
clock offset plus the delivery delay. One difference says little (a spooled
record is minutes late, a network hiccup seconds), so each host keeps a
short window of them and its estimate is the window's median.

The estimate that counts is *relative*: the host's median minus the median
over all hosts of this task. A broker whose own clock is off, a replay that
sends an old recording now, or a spool that flushes every host's records
late moves every host alike and cancels; one host whose clock is a day
ahead or an hour behind stands out. With fewer than `min_hosts` hosts no
one can tell which clock is wrong, so the estimator says nothing.

It only flags, never corrects: a record's time is what the host said, and
silently shifting it would hide a bad host from the people who must fix
its clock (the event clock already keeps such a host from steering time,
see `streams.worker.watermark`). A host is flagged after `confirm`
consecutive estimates past the bound, once; it is reported again only when
it recovers or its offset changes by more than the bound, so a bad host
yields a handful of findings, never a flood.

Pure: no wall clock, no I/O; the times come from the records.
"""

from __future__ import annotations

import heapq
import math
import statistics
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Literal

from trainguard.schemas.ids import anomaly_id
from trainguard.schemas.records import Anomaly

SkewState = Literal["skewed", "changed", "recovered"]


@dataclass(frozen=True)
class SkewFinding:
    """One change of a host's clock verdict (the worker turns it into a `clock_skew` anomaly)."""

    node: str
    state: SkewState
    offset_s: float  # the host's median (ts - message timestamp) minus the median over hosts
    reference_s: float  # that median over hosts (the broker's or the network's share, cancelled)
    onset: float  # message time at which the current verdict began
    at: float  # message time of the record that settled it
    hosts: int  # hosts compared


class _Host:
    """One host's window of (record ts - message ts) and its verdict.

    The window is a ring of doubles inside one `array`, not a deque of float
    objects: every record of the host writes it (a fleet's every event), and
    a deque's block, the float object it points to and the float it drops
    (made 31 records, seconds, ago) were three cold cache lines per event once
    a task holds 12,500 hosts (issue 23). Slotted for the same reason: the
    fields sit in the object, not in a separate values array.
    """

    __slots__ = ("ring", "oldest", "seen", "estimate", "streak", "streak_since", "flagged", "flagged_offset",
                 "heard")

    def __init__(self, window: int, deltas: Iterable[float] = (), seen: int = 0, estimate: float | None = None,
                 streak: int = 0, streak_since: float = 0.0, flagged: bool = False, flagged_offset: float = 0.0,
                 heard: float = 0.0) -> None:
        kept = list(deltas)[-window:] if window > 0 else []
        self.ring = array("d", kept)  # grows to the window, then each new value overwrites the oldest
        self.oldest = 0  # once full: where the oldest value sits
        self.seen = seen
        self.estimate = estimate
        self.streak = streak  # consecutive estimates that disagree with the current verdict
        self.streak_since = streak_since
        self.flagged = flagged
        self.flagged_offset = flagged_offset
        self.heard = heard  # message time of its newest record: past the bound, the least recently heard go

    @property
    def deltas(self) -> list[float]:
        """The window, oldest first (what a snapshot stores)."""
        ring, at = self.ring, self.oldest
        return [*ring[at:], *ring[:at]]

    def __setstate__(self, state: Any) -> None:
        """A host pickled whole, as snapshots from before issue 23 hold it (a dataclass with a deque)."""
        fields = dict(state[1] if isinstance(state, tuple) else state)
        deltas = fields.pop("deltas", ())
        _Host.__init__(self, getattr(deltas, "maxlen", None) or len(deltas), deltas,
                       **{k: v for k, v in fields.items() if k in _HOST_FIELDS})


# A host's fields after its window, in a snapshot's order: every host is packed as one tuple (issue 23).
_HOST_FIELDS = ("seen", "estimate", "streak", "streak_since", "flagged", "flagged_offset", "heard")
_HOST_REST = attrgetter(*_HOST_FIELDS)


@dataclass
class ClockSkewEstimator:
    """Rolling median of (record ts - message ts) per host, relative to the hosts' median; bounded."""

    bound_s: float = 120.0
    window: int = 31  # differences kept per host
    every: int = 16  # a new estimate every this many records of a host (the median is not free)
    confirm: int = 3  # consecutive estimates before a verdict changes
    min_hosts: int = 3
    # Hosts not heard for longest are forgotten beyond this. It must hold every host of the task's largest
    # job: a 100,000-GPU job is 12,500 hosts in one task, and past the bound each host was forgotten before
    # its next record, so none ever reached an estimate while every record paid for a new host (issue 23).
    max_hosts: int = 100_000
    _hosts: dict[str, _Host] = field(default_factory=dict)
    _reference: float = 0.0
    _stale: int = 0  # estimates made since the reference was recomputed

    def observe(self, node: str, ts: float, message_ts: float) -> SkewFinding | None:
        """Note one record of `node`; the finding when its verdict changes. `message_ts` <= 0: unknown."""
        if not node or message_ts <= 0:
            return None  # a recording without message times (the backtest): nothing to compare
        hosts = self._hosts
        host = hosts.get(node)
        if host is None:
            host = self._add(node)
        host.heard = message_ts
        ring = host.ring
        if len(ring) < self.window:
            ring.append(ts - message_ts)
        else:
            at = host.oldest
            ring[at] = ts - message_ts
            host.oldest = at + 1 if at + 1 < len(ring) else 0
        host.seen += 1
        if host.seen % self.every:
            return None  # the hot path: a lookup and three stores into the host
        host.estimate = statistics.median(ring)
        self._refresh_reference()
        known = self._known()
        if known < self.min_hosts:
            return None
        return self._judge(node, host, message_ts, known)

    def __getstate__(self) -> dict[str, Any]:
        """Every host as one tuple (its window, then its other fields): 12,500
        hosts' objects and deques of floats, reduced one by one, cost pickle more than the rest of a
        task's state."""
        state = dict(vars(self))
        state["_hosts"] = [(node, tuple(h.deltas), *_HOST_REST(h)) for node, h in self._hosts.items()]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        hosts = state.get("_hosts")
        if isinstance(hosts, list):  # packed; snapshots from before issue 23 hold the OrderedDict itself
            window = state.get("window", self.window)
            state = {**state, "_hosts": {node: _Host(window, deltas, *rest) for node, deltas, *rest in hosts}}
        vars(self).update(state)

    def offset(self, node: str) -> float | None:
        """The host's current relative offset estimate (None before its first estimate)."""
        host = self._hosts.get(node)
        if host is None or host.estimate is None:
            return None
        return host.estimate - self._reference

    def __len__(self) -> int:
        return len(self._hosts)

    def _known(self) -> int:
        """Hosts with an estimate (counted exactly among few, approximated by all among many)."""
        if len(self._hosts) >= 64:
            return len(self._hosts)
        return sum(1 for h in self._hosts.values() if h.estimate is not None)

    def _add(self, node: str) -> _Host:
        """A new host; past the bound, the 1/64 of hosts heard least recently (at least one) are forgotten.

        Each host notes the message time of its newest record, and the hosts
        heard longest ago are found when the bound bites, all at once. Keeping
        the map in order of hearing instead (a `move_to_end` per record) read
        a second table on every record, a cache miss per event at 12,500
        hosts (issue 23); the search, O(hosts), comes once per hosts/64 new
        ones, so a stream of new hosts costs the same per host at any bound.
        """
        hosts = self._hosts
        host = hosts[node] = _Host(self.window)
        if len(hosts) > self.max_hosts:
            host.heard = math.inf  # the newcomer stays
            for old in heapq.nsmallest(max(1, self.max_hosts >> 6), hosts, key=lambda n: hosts[n].heard):
                del hosts[old]
        return host

    def _refresh_reference(self) -> None:
        """The median of the hosts' estimates; recomputed at once among few hosts, now and then among many."""
        self._stale += 1
        if len(self._hosts) >= 64 and self._stale < len(self._hosts) // 8:
            return
        self._stale = 0
        estimates = [h.estimate for h in self._hosts.values() if h.estimate is not None]
        if estimates:
            self._reference = statistics.median(estimates)

    def _judge(self, node: str, host: _Host, at: float, hosts: int) -> SkewFinding | None:
        assert host.estimate is not None
        offset = host.estimate - self._reference
        past = abs(offset) > self.bound_s
        if host.flagged:
            moved = abs(offset - host.flagged_offset) > self.bound_s
            disagrees = not past or moved
        else:
            disagrees = past
        if not disagrees:
            host.streak = 0
            return None
        if host.streak == 0:
            host.streak_since = at
        host.streak += 1
        if host.streak < self.confirm:
            return None
        host.streak = 0
        state: SkewState = "recovered" if host.flagged and not past else "changed" if host.flagged else "skewed"
        host.flagged, host.flagged_offset = past, offset
        return SkewFinding(node=node, state=state, offset_s=round(offset, 3), reference_s=round(self._reference, 3),
                           onset=host.streak_since, at=at, hosts=hosts)


def skew_anomaly(finding: SkewFinding, job: str = "") -> Anomaly:
    """The `clock_skew` anomaly of a finding: node-local, the offset in its evidence, never an incident.

    Its id is fixed by the node, the verdict and its onset (message time), so
    a redelivered fetch names the same finding.
    """
    return Anomaly(
        ts=finding.at, id=anomaly_id("clock_skew", finding.node, finding.state, f"{finding.onset:.3f}"),
        kind="clock_skew", detector="clock_skew", onset=finding.onset, job=job, nodes=[finding.node],
        score=0.0 if finding.state == "recovered" else 1.0,
        evidence={"state": finding.state, "offset_s": finding.offset_s, "reference_s": finding.reference_s,
                  "hosts": finding.hosts},
    )
