"""The network detector sorts a sample's port rates once, not once per port, and finds exactly what it found before.

`_Before` is the detector with the per-port sort and the eagerly built evidence it had until issue 23;
both are fed the same random streams of 8-port samples (busy, idle, down, degraded, error bursts, ties,
different rates) and must return the same anomalies, evidence included. JSON carries no NaN (the
codec dead-letters it), so a NaN rate reaches the detector only in process; it takes the old path.
"""

from __future__ import annotations

import math
import random
from typing import Any

from trainguard.detectors.network import NetworkDetector, _active
from trainguard.schemas.records import Anomaly, RdmaPort, RdmaSample


class _Before(NetworkDetector):
    def _quiet(self, sample: RdmaSample) -> bool:  # the one-pass path for quiet samples came later
        return False

    def _degraded(self, sample: RdmaSample) -> dict[tuple[str, int], Any]:  # type: ignore[override]
        rates = [p.tx_bps + p.rx_bps if _active(p.state) else None for p in sample.ports]
        out: dict[tuple[str, int], Any] = {}
        for i, p in enumerate(sample.ports):
            key = (sample.node, p.device, p.port)
            rate = rates[i]
            siblings = sorted(r for j, r in enumerate(rates) if j != i and r is not None)
            if rate is None or not siblings:
                continue
            mid = siblings[len(siblings) // 2]
            if mid < self.busy_bps:
                continue
            slow = self._slow.get(key)
            figures = {"bps": round(rate), "siblings_median_bps": round(mid), "share": round(rate / mid, 3)}
            if rate >= self.degraded_ratio * mid:
                if slow is not None:
                    del self._slow[key]
                out[(p.device, p.port)] = (False, figures)
                continue
            if slow is None:
                self._slow[key] = slow = [sample.ts, 0.0, 0.0]
            slow[1] += 1
            out[(p.device, p.port)] = (slow[1] >= self.degraded_samples, figures)
        return out

    def _fail_slow(self, sample: RdmaSample, p: RdmaPort, grown: int, slow: Any) -> Anomaly | None:  # type: ignore[override]
        from trainguard.detectors.common import finding

        key = (sample.node, p.device, p.port)
        errors = grown >= self.error_burst
        degraded = slow is not None and slow[0]
        base = {"node": sample.node, "device": p.device, "port": p.port, "state": p.state, "error_growth": grown,
                **(slow[1] if slow is not None else {})}
        if errors or degraded:
            verdict = self._persist.bad(key, sample.node, sample.ts)
            if verdict is None:
                return None
            cause = "degraded" if degraded else "error_burst"
            first_slow = self._slow.get(key)
            onset = min(self._persist.onset(key) or sample.ts, first_slow[0] if first_slow else sample.ts)
            return finding(self.instance, "network", ts=max(sample.ts, self._now), onset=min(onset, sample.ts),
                           job=sample.job, nodes=[sample.node], key=(key, "fail_slow", onset),
                           evidence={**base, "cause": cause,
                                     **self._persist.evidence(key, sample.node, sample.ts, verdict)})
        healthy = grown == 0 and (slow is not None or len(sample.ports) < 2)
        if not healthy:
            return None
        transient = self._persist.good(key, sample.node, sample.ts, min_sightings=2)
        if transient is None:
            return None
        return finding(self.instance, "network", ts=max(sample.ts, self._now), onset=transient["start"],
                       job=sample.job, nodes=[sample.node], key=(key, "transient", transient["start"]),
                       score=0.0, evidence={**base, "cause": "fail_slow", **transient})


def _port(rng: random.Random, i: int, errors: int) -> RdmaPort:
    state = "DOWN" if rng.random() < 0.03 else rng.choice(["ACTIVE", "4: ACTIVE"])
    rate = rng.choice([2e10, 2e10, 2e10, 1.5e10, 4e9, 0.0, 5e8, 2e10 + rng.random()])
    return RdmaPort(device=f"mlx5_{i}", port=1, state=state, tx_bps=rate / 2, rx_bps=rate / 2,
                    symbol_errors=errors, link_downed=int(rng.random() < 0.01))


def _same(a: list[Anomaly], b: list[Anomaly]) -> bool:
    def plain(x: Anomaly) -> str:
        return repr(x).replace("nan", "NaN")
    return [plain(x) for x in a] == [plain(x) for x in b]


def test_the_one_sort_finds_what_the_sort_per_port_found() -> None:
    rng = random.Random(23)
    found = 0
    for stream in range(40):
        new, old = NetworkDetector(persist_s=60.0, recur_n=2), _Before(persist_s=60.0, recur_n=2)
        errors = [0] * 8
        ports = rng.choice([1, 2, 3, 4, 8])
        for s in range(300):
            for i in range(ports):
                if rng.random() < 0.02:
                    errors[i] += rng.choice([1, 15])
            sample = RdmaSample(ts=1000.0 + s * 5, node=f"n{stream % 3}", job="j",
                                ports=[_port(rng, i, errors[i]) for i in range(ports)])
            a, b = new.observe(sample), old.observe(sample)
            assert _same(a, b), (stream, s)
            found += len(a)
    assert found > 20  # degraded, error-burst, down and transient findings were all exercised, not only silence


def test_a_nan_rate_takes_the_sort_per_port() -> None:
    idle = [RdmaPort(device=f"mlx5_{i}", port=1, tx_bps=1e8) for i in range(1, 4)]  # below busy_bps: no figures
    for ports in ([RdmaPort(device="mlx5_0", port=1, tx_bps=math.nan), *idle],
                  [*idle, RdmaPort(device="mlx5_0", port=1, tx_bps=math.nan)]):
        sample = RdmaSample(ts=1.0, node="n", ports=ports)
        assert _same(NetworkDetector().observe(sample), _Before().observe(sample))
