"""network: an RDMA port that goes down, or fails slow for long enough (or often enough) to evict.

*Down*: one bad reading is often noise (a flap during a switch firmware
update, a counter read racing a reset), so a port counts as down only when
it is seen bad in two samples within `confirm_window_s` of event time. A
sample is bad for a port when its state is not ACTIVE or `link_downed` grew.
The job cannot run on such a port: it is reported at once.

*Fail-slow*: a sample in which a port's error counters (symbol, receive,
link-error-recovery) grew by at least `error_burst`, or in which it carries
a fraction of its siblings' traffic (below), is a fail-slow sighting. Such
episodes mostly recover on their own within a minute or two, and evicting
the node restarts its whole job, so they pass through
`detectors.persistence`: an episode shorter than `persist_s` (default 120 s)
becomes a *transient* anomaly (score 0, `evidence.persistence="transient"`,
its duration and the node's count), which the correlator never turns into
an incident; an episode lasting `persist_s`, or the `recur_n`-th episode of
one node within `recur_window_s`, is a network fault naming the node and
the port, with the node's history in the evidence. Transmit discards are
congestion, not faults, and are left out. Counters are cumulative; a
decrease is a reset, not a fault.

A port can also fail *quietly*: renegotiated to a lower speed or behind a
degraded cable, it carries a fraction of what its sibling ports on the
same node carry, with no error at all. Collectives stripe traffic evenly
over a node's rails, so while the siblings are busy (median at least
`busy_bps`), a port below `degraded_ratio` of their median in
`degraded_samples` successive samples is a degraded sighting, reported
as a network fault on that port (`cause: degraded`) once it persists.
"""

from __future__ import annotations

import sys
from bisect import bisect_left
from typing import Any

from trainguard.detectors.base import Detector
from trainguard.detectors.common import Bounded, DictRows, Snapshottable, finding
from trainguard.detectors.dispatch import on
from trainguard.detectors.persistence import Persistence
from trainguard.schemas.records import Anomaly, RdmaPort, RdmaSample


class _Port(Snapshottable):
    __slots__ = ("downed", "errors", "first_bad", "last_bad", "fired")

    def __init__(self, downed: int, errors: int) -> None:
        self.downed = downed
        self.errors = errors
        self.first_bad: float | None = None
        self.last_bad: float | None = None
        self.fired = False


# Ports kept per node: a node has a few HCAs of one or two ports; a sample naming ever new ports (a bad
# collector, a forged stream) makes the node forget its oldest instead of growing without bound.
PORTS_PER_NODE = 64


def _active(state: str) -> bool:
    """ACTIVE in any spelling: "ACTIVE", "active", sysfs's "4: ACTIVE"."""
    return "ACTIVE" in state.upper()


def _errors(p: RdmaPort) -> int:
    return p.symbol_errors + p.rcv_errors + p.link_error_recovery


def _base(sample: RdmaSample, p: RdmaPort, grown: int, slow: tuple[bool, float, float] | None) -> dict[str, Any]:
    """A fail-slow finding's evidence about the port (built only when there is a finding: the hot path)."""
    base: dict[str, Any] = {"node": sample.node, "device": p.device, "port": p.port, "state": p.state,
                            "error_growth": grown}
    if slow is not None:
        rate, mid = slow[1], slow[2]
        base.update({"bps": round(rate), "siblings_median_bps": round(mid), "share": round(rate / mid, 3)})
    return base


class NetworkDetector(Detector):
    """Flags RDMA ports that are down (two samples within a window) or fail slow for `persist_s` or recurrently.

    >>> from trainguard.schemas.records import RdmaSample, RdmaPort
    >>> d = NetworkDetector(confirm_window_s=30)
    >>> up = RdmaSample(ts=0.0, node="n1", ports=[RdmaPort(device="mlx5_0", port=1)])
    >>> down = lambda t: RdmaSample(ts=t, node="n1", ports=[RdmaPort(device="mlx5_0", port=1, state="DOWN")])
    >>> d.observe(up), d.observe(down(10.0))
    ([], [])
    >>> [(a.kind, a.nodes, a.onset) for a in d.observe(down(20.0))]
    [('network', ['n1'], 10.0)]
    """

    state_is_a_tree = True  # checked by detectors.checks (check_state_is_a_tree)

    def __init__(
        self,
        *,
        instance: str = "network",
        confirm_window_s: float = 120.0,
        error_burst: int = 10,
        degraded_ratio: float = 0.5,
        degraded_samples: int = 3,
        busy_bps: float = 1e9,
        persist_s: float = 120.0,
        recur_n: int = 3,
        recur_window_s: float = 3600.0,
        max_ports: int = 100_000,
    ) -> None:
        super().__init__(instance=instance)
        self.confirm_window_s = confirm_window_s
        self.error_burst = error_burst
        self.degraded_ratio = degraded_ratio
        self.degraded_samples = degraded_samples
        self.busy_bps = busy_bps
        self._slow: Bounded[tuple[str, str, int], list[float]] = Bounded(max_ports)  # key -> [first, n, fired]
        # node -> its ports by (device, port): one row per node, so a sample is one lookup of its node, not one
        # per port in a map of every port (at 12,500 nodes each was its own cold cache lines, issue 23).
        self._ports: Bounded[str, dict[tuple[str, int], _Port]] = Bounded(max(1, max_ports // 8), DictRows(_Port))
        self.persist_s, self.recur_n, self.recur_window_s = persist_s, recur_n, recur_window_s
        self._persist = Persistence(persist_s=persist_s, recur_n=recur_n, recur_window_s=recur_window_s,
                                    gap_s=30.0, max_keys=max_ports)
        self._now = float("-inf")

    def __setstate__(self, state: dict[str, Any]) -> None:
        """As pickled; a snapshot from before the rows keys its ports by (node, device, port), grouped here."""
        vars(self).update(state)
        ports: Bounded[Any, Any] = self._ports
        if ports and isinstance(next(iter(ports)), tuple):
            rows: Bounded[str, dict[tuple[str, int], _Port]] = Bounded(max(1, ports.cap // 8), DictRows(_Port))
            for (node, device, port), value in ports.items():
                row = rows.get(node)
                if row is None:
                    rows[node] = row = {}
                row[(device, port)] = value
            rows.evicted = ports.evicted
            self._ports = rows

    @on(RdmaSample)
    def _sample(self, record: RdmaSample) -> list[Anomaly]:
        if record.ts > self._now:
            self._now = record.ts  # the stream's clock: a host running behind must not date a finding early
        if self._quiet(record):
            return []
        out: list[Anomaly] = []
        slow = self._degraded(record) if len(record.ports) >= 2 else {}
        for p in record.ports:
            hard, grown = self._check(record, p)
            if hard is not None:
                out.append(hard)
            found = self._fail_slow(record, p, grown, slow.get((p.device, p.port)))
            if found is not None:
                out.append(found)
        return out

    def _quiet(self, sample: RdmaSample) -> bool:
        """The common sample, in one pass: every port known, ACTIVE, nothing downed, errors below a burst, busy
        shares healthy, and no episode, slow run or bad sighting open for any of them. Such a sample finds
        nothing and changes only the ports' counters, which this records; anything else (False) takes the
        port-by-port path, which gives the same answer for this sample: this only skips its work."""
        ports, node, burst = sample.ports, sample.node, self.error_burst
        known = self._ports.get(node)
        if known is None:
            return False
        slow_runs = self._slow if self._slow else None  # asked per port only when some run is open
        persist = self._persist if self._persist.any_open() else None
        seen: list[tuple[_Port, int, int]] = []
        rates: list[float] = []
        for p in ports:
            state = known.get((p.device, p.port))
            if (state is None or state.last_bad is not None or p.link_downed > state.downed
                    or (p.state != "ACTIVE" and not _active(p.state))
                    or (slow_runs is not None and (node, p.device, p.port) in slow_runs)
                    or (persist is not None and persist.is_open((node, p.device, p.port)))):
                return False
            errors = p.symbol_errors + p.rcv_errors + p.link_error_recovery  # _errors(p), inline: the hot path
            if errors - state.errors >= burst:
                return False
            seen.append((state, p.link_downed, errors))
            rates.append(p.tx_bps + p.rx_bps)
        if len(ports) >= 2 and not self._shares_healthy(rates):
            return False
        if len({id(state) for state, _, _ in seen}) < len(seen):
            return False  # a port listed twice: the port-by-port path reads it in order
        for state, downed, errors in seen:
            state.downed, state.errors = downed, errors
        return True

    def _shares_healthy(self, rates: list[float]) -> bool:
        """No port below `degraded_ratio` of its busy siblings' median (as `_degraded` judges; NaN: not here)."""
        active = sorted(rates)
        total = sum(active)
        if total != total:
            return False  # a NaN (or +inf with -inf): the port-by-port path judges it
        k = (len(active) - 1) // 2
        floor_ratio, busy = self.degraded_ratio, self.busy_bps
        # Every port's siblings' median is active[k] or active[k + 1]. With that largest median idle, or the
        # slowest port at its share of it, no port can be below its share of a busy median (a healthy
        # node's sample, nearly always): one comparison instead of a search per port (the hot path).
        if floor_ratio >= 0 and (active[k + 1] < busy or active[0] >= floor_ratio * active[k + 1]):
            return True
        for rate in rates:
            mid = active[k] if k < bisect_left(active, rate) else active[k + 1]
            if mid >= busy and rate < floor_ratio * mid:
                return False
        return True

    def _degraded(self, sample: RdmaSample) -> dict[tuple[str, int], tuple[bool, float, float]]:
        """Per port compared with its busy siblings: (slow for `degraded_samples` samples, its rate, the
        siblings' median); ports with no busy siblings to compare with are left out (an idle link says nothing).

        The sample's active rates are sorted once: a port's siblings are that list less one copy of its own
        rate, so their median is read off it (one sort per sample, not one per port: the hot path).
        """
        rates = [p.tx_bps + p.rx_bps if _active(p.state) else None for p in sample.ports]
        active = sorted(r for r in rates if r is not None)
        if len(active) < 2 or any(r != r for r in active):  # NaN sorts nowhere: each port sorts its own
            return self._degraded_each(sample, rates)
        k = (len(active) - 1) // 2  # the median's index among a port's len(active) - 1 siblings
        out: dict[tuple[str, int], tuple[bool, float, float]] = {}
        for p, rate in zip(sample.ports, rates):
            if rate is None:
                continue
            mid = active[k] if k < bisect_left(active, rate) else active[k + 1]
            self._judge_share(sample, p, rate, mid, out)
        return out

    def _degraded_each(self, sample: RdmaSample, rates: list[float | None]) -> dict[tuple[str, int],
                                                                                  tuple[bool, float, float]]:
        """`_degraded` with each port's siblings sorted apart (few active ports, or a NaN rate)."""
        out: dict[tuple[str, int], tuple[bool, float, float]] = {}
        for i, p in enumerate(sample.ports):
            rate = rates[i]
            siblings = sorted(r for j, r in enumerate(rates) if j != i and r is not None)
            if rate is None or not siblings:
                continue
            self._judge_share(sample, p, rate, siblings[len(siblings) // 2], out)
        return out

    def _judge_share(self, sample: RdmaSample, p: RdmaPort, rate: float, mid: float,
                     out: dict[tuple[str, int], tuple[bool, float, float]]) -> None:
        """One busy-compared port: a healthy share ends its run of slow samples, a low one extends it."""
        if mid < self.busy_bps:
            return
        key = (sample.node, p.device, p.port)
        slow = self._slow.get(key)
        if rate >= self.degraded_ratio * mid:
            if slow is not None:
                del self._slow[key]  # a healthy busy sample ends the run of slow ones
            out[(p.device, p.port)] = (False, rate, mid)
            return
        if slow is None:
            self._slow[key] = slow = [sample.ts, 0.0, 0.0]
        slow[1] += 1
        out[(p.device, p.port)] = (slow[1] >= self.degraded_samples, rate, mid)

    def _fail_slow(self, sample: RdmaSample, p: RdmaPort, grown: int,
                   slow: tuple[bool, float, float] | None) -> Anomaly | None:
        """An error burst or a degraded share: evicting only once it persists or recurs (detectors.persistence)."""
        key = (sample.node, p.device, p.port)
        errors = grown >= self.error_burst
        degraded = slow is not None and slow[0]
        if errors or degraded:
            verdict = self._persist.bad(key, sample.node, sample.ts)
            if verdict is None:
                return None
            cause = "degraded" if degraded else "error_burst"
            first_slow = self._slow.get(key)
            onset = min(self._persist.onset(key) or sample.ts, first_slow[0] if first_slow else sample.ts)
            return finding(self.instance, "network", ts=max(sample.ts, self._now), onset=min(onset, sample.ts),
                           job=sample.job, nodes=[sample.node], key=(key, "fail_slow", onset),
                           evidence={**_base(sample, p, grown, slow), "cause": cause,
                                     **self._persist.evidence(key, sample.node, sample.ts, verdict)})
        healthy = grown == 0 and (slow is not None or len(sample.ports) < 2)
        if not healthy:
            return None
        transient = self._persist.good(key, sample.node, sample.ts, min_sightings=2)
        if transient is None:
            return None
        return finding(self.instance, "network", ts=max(sample.ts, self._now), onset=transient["start"],
                       job=sample.job, nodes=[sample.node], key=(key, "transient", transient["start"]),
                       score=0.0, evidence={**_base(sample, p, grown, slow), "cause": "fail_slow", **transient})

    def _check(self, sample: RdmaSample, p: RdmaPort) -> tuple[Anomaly | None, int]:
        """A port down or flapping, confirmed twice; and how much its error counters grew."""
        key = (sample.node, p.device, p.port)
        row = self._ports.get(sample.node)
        if row is None:
            self._ports[sample.node] = row = {}
        state = row.get((p.device, p.port))
        errors = _errors(p)
        if state is None:
            if len(row) >= PORTS_PER_NODE:
                del row[next(iter(row))]
                self._ports.evicted += 1
            # The device's name interned: every node's port keys then share one string, compared in cache.
            row[(sys.intern(p.device), p.port)] = state = _Port(p.link_downed, errors)
            bad = not _active(p.state)
            downed = grown = 0
        else:
            downed = max(0, p.link_downed - state.downed)
            grown = max(0, errors - state.errors)
            state.downed, state.errors = p.link_downed, errors
            bad = not _active(p.state) or downed > 0
        ts = sample.ts
        if not bad:
            if state.last_bad is not None and ts - state.last_bad > self.confirm_window_s:
                state.first_bad = state.last_bad = None
                state.fired = False
            return None, grown
        if state.first_bad is None or state.last_bad is None or ts - state.last_bad > self.confirm_window_s:
            state.first_bad, state.last_bad = ts, ts
            return None, grown
        state.last_bad = ts
        if state.fired or ts == state.first_bad:
            return None, grown
        state.fired = True
        return finding(
            self.instance, "network", ts=max(ts, self._now), onset=state.first_bad, job=sample.job, nodes=[sample.node],
            key=key, evidence={"node": sample.node, "device": p.device, "port": p.port, "state": p.state,
                               "link_downed_growth": downed, "error_growth": grown, "cause": "port_down"},
        ), grown

    def state_size(self) -> int:
        return sum(map(len, self._ports.values())) + len(self._slow) + self._persist.size()
