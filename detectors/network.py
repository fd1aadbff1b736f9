"""network: an RDMA port that goes down or bursts errors, confirmed twice.

One bad reading is often noise (a flap during a switch firmware update, a
counter read racing a reset), so a port counts as faulty only when it is
seen bad in two samples within `confirm_window_s` of event time. A sample
is bad for a port when its state is not ACTIVE, when `link_downed` grew, or
when its error counters (symbol, receive, link-error-recovery) grew by at
least `error_burst`. Transmit discards are congestion, not faults, and are
left out. Counters are cumulative; a decrease is a reset, not a fault.

A port can also fail *quietly*: renegotiated to a lower speed or behind a
degraded cable, it carries a fraction of what its sibling ports on the
same node carry, with no error at all. Collectives stripe traffic evenly
over a node's rails, so while the siblings are busy (median at least
`busy_bps`), a port below `degraded_ratio` of their median in
`degraded_samples` successive samples is reported as degraded.
"""

from __future__ import annotations

from detectors.base import Detector
from detectors.common import Bounded, Snapshottable, finding
from detectors.dispatch import on
from schemas.records import Anomaly, RdmaPort, RdmaSample


class _Port(Snapshottable):
    __slots__ = ("downed", "errors", "first_bad", "last_bad", "fired")

    def __init__(self, downed: int, errors: int) -> None:
        self.downed = downed
        self.errors = errors
        self.first_bad: float | None = None
        self.last_bad: float | None = None
        self.fired = False


def _active(state: str) -> bool:
    """ACTIVE in any spelling: "ACTIVE", "active", sysfs's "4: ACTIVE"."""
    return "ACTIVE" in state.upper()


def _errors(p: RdmaPort) -> int:
    return p.symbol_errors + p.rcv_errors + p.link_error_recovery


class NetworkDetector(Detector):
    """Flags RDMA ports that are down or erroring in two samples within a window.

    >>> from schemas.records import RdmaSample, RdmaPort
    >>> d = NetworkDetector(confirm_window_s=30)
    >>> up = RdmaSample(ts=0.0, node="n1", ports=[RdmaPort(device="mlx5_0", port=1)])
    >>> down = lambda t: RdmaSample(ts=t, node="n1", ports=[RdmaPort(device="mlx5_0", port=1, state="DOWN")])
    >>> d.observe(up), d.observe(down(10.0))
    ([], [])
    >>> [(a.kind, a.nodes, a.onset) for a in d.observe(down(20.0))]
    [('network', ['n1'], 10.0)]
    """

    def __init__(
        self,
        *,
        instance: str = "network",
        confirm_window_s: float = 120.0,
        error_burst: int = 10,
        degraded_ratio: float = 0.5,
        degraded_samples: int = 3,
        busy_bps: float = 1e9,
        max_ports: int = 100_000,
    ) -> None:
        super().__init__(instance=instance)
        self.confirm_window_s = confirm_window_s
        self.error_burst = error_burst
        self.degraded_ratio = degraded_ratio
        self.degraded_samples = degraded_samples
        self.busy_bps = busy_bps
        self._slow: Bounded[tuple[str, str, int], list[float]] = Bounded(max_ports)  # key -> [first, n, fired]
        self._ports: Bounded[tuple[str, str, int], _Port] = Bounded(max_ports)
        self._now = float("-inf")

    @on(RdmaSample)
    def _sample(self, record: RdmaSample) -> list[Anomaly]:
        if record.ts > self._now:
            self._now = record.ts  # the stream's clock: a host running behind must not date a finding early
        out: list[Anomaly] = []
        for p in record.ports:
            reason = self._check(record, p)
            if reason is not None:
                out.append(reason)
        if len(record.ports) >= 2:
            out.extend(self._degraded(record))
        return out

    def _degraded(self, sample: RdmaSample) -> list[Anomaly]:
        """Ports carrying a fraction of their busy siblings' traffic, error-free or not."""
        rates = [p.tx_bps + p.rx_bps if _active(p.state) else None for p in sample.ports]
        out: list[Anomaly] = []
        for i, p in enumerate(sample.ports):
            key = (sample.node, p.device, p.port)
            rate = rates[i]
            siblings = sorted(r for j, r in enumerate(rates) if j != i and r is not None)
            if rate is None or not siblings:
                continue
            mid = siblings[len(siblings) // 2]
            slow = self._slow.get(key)
            if mid < self.busy_bps or rate >= self.degraded_ratio * mid:
                if slow is not None and mid >= self.busy_bps:
                    del self._slow[key]  # a healthy busy sample ends the episode
                continue
            if slow is None:
                self._slow[key] = slow = [sample.ts, 0.0, 0.0]
            slow[1] += 1
            if slow[1] >= self.degraded_samples and not slow[2]:
                slow[2] = 1.0
                out.append(finding(
                    self.instance, "network", ts=max(sample.ts, self._now), onset=slow[0], job=sample.job,
                    nodes=[sample.node], key=(key, "degraded"),
                    evidence={"node": sample.node, "device": p.device, "port": p.port, "state": p.state,
                              "cause": "degraded", "bps": round(rate), "siblings_median_bps": round(mid),
                              "share": round(rate / mid, 3)}))
        return out

    def _check(self, sample: RdmaSample, p: RdmaPort) -> Anomaly | None:
        key = (sample.node, p.device, p.port)
        state = self._ports.get(key)
        errors = _errors(p)
        if state is None:
            self._ports[key] = state = _Port(p.link_downed, errors)
            bad = not _active(p.state)
            downed = grown = 0
        else:
            downed = max(0, p.link_downed - state.downed)
            grown = max(0, errors - state.errors)
            state.downed, state.errors = p.link_downed, errors
            bad = not _active(p.state) or downed > 0 or grown >= self.error_burst
        ts = sample.ts
        if not bad:
            if state.last_bad is not None and ts - state.last_bad > self.confirm_window_s:
                state.first_bad = state.last_bad = None
                state.fired = False
            return None
        if state.first_bad is None or state.last_bad is None or ts - state.last_bad > self.confirm_window_s:
            state.first_bad, state.last_bad = ts, ts
            return None
        state.last_bad = ts
        if state.fired or ts == state.first_bad:
            return None
        state.fired = True
        return finding(
            self.instance, "network", ts=max(ts, self._now), onset=state.first_bad, job=sample.job, nodes=[sample.node],
            key=key, evidence={"node": sample.node, "device": p.device, "port": p.port, "state": p.state,
                               "link_downed_growth": downed, "error_growth": grown},
        )

    def state_size(self) -> int:
        return len(self._ports) + len(self._slow)
