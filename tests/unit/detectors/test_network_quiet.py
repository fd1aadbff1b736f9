"""The network detector's one-pass path for quiet samples finds exactly what the port-by-port path finds.

Most RDMA samples say nothing: every port up, no error burst, shares even. `NetworkDetector._quiet`
answers those in one pass (issue 23: the network detector was the worker's costliest per event); every
other sample takes the port-by-port path. `_PortByPort` is the detector without the one-pass path. Both
are fed the same random streams (quiet stretches, downs, flaps, error bursts, counter resets, degraded
and idle links, a port listed twice) and must return the same anomalies and end in the same state.
"""

from __future__ import annotations

import pickle
import random

import msgspec
from fakes import quiet_variants, same_findings

from trainguard.detectors.network import NetworkDetector
from trainguard.schemas.records import RdmaPort, RdmaSample

_Counting, _PortByPort = quiet_variants(NetworkDetector)


def _state(d: NetworkDetector) -> bytes:
    ports = {(n, *k): (v.downed, v.errors, v.first_bad, v.last_bad, v.fired)
             for n, row in d._ports.items() for k, v in row.items()}
    return pickle.dumps((ports, dict(d._slow), dict(d._persist._episodes), d._now))


def _samples(rng: random.Random, node: str, n: int) -> list[RdmaSample]:
    width = rng.choice([1, 2, 4, 8])
    errors, downed, out = [0] * width, [0] * width, []
    for s in range(n):
        trouble = rng.random() < 0.2 / width  # mostly quiet stretches, as on a fleet
        ports = []
        for i in range(width):
            if trouble and rng.random() < 0.3:
                errors[i] += rng.choice([1, 3, 15])
            if trouble and rng.random() < 0.05:
                downed[i] += 1
            if rng.random() < 0.01:
                errors[i] = downed[i] = 0  # a counter reset
            state = "DOWN" if trouble and rng.random() < 0.1 else rng.choice(["ACTIVE", "4: ACTIVE", "active"])
            rate = rng.choice([2e10, 2e10, 1.9e10]) if not trouble else rng.choice([2e10, 4e9, 5e8, 0.0])
            ports.append(RdmaPort(device=f"mlx5_{i}", port=1, state=state, tx_bps=rate / 2, rx_bps=rate / 2,
                                  symbol_errors=errors[i], link_downed=downed[i]))
        if rng.random() < 0.03:  # a port listed twice (a hostile or buggy collector), first as if reset
            ports.insert(0, msgspec.structs.replace(ports[0], symbol_errors=0, link_downed=0))
        out.append(RdmaSample(ts=1000.0 + s * 5 + rng.random(), node=node, job="j", ports=ports))
    return out


def test_the_one_pass_path_finds_what_the_port_by_port_path_finds() -> None:
    rng = random.Random(2026)
    found = 0
    for stream in range(30):
        fast, slow = _Counting(persist_s=60.0, recur_n=2), _PortByPort(persist_s=60.0, recur_n=2)
        found += same_findings(fast, slow, _samples(rng, f"n{stream % 4}", 400), stream)
        assert _state(fast) == _state(slow), stream
        assert fast.quiet > 50, fast.quiet  # the one-pass path really answered many of the 400 samples
    assert found > 20  # downs, bursts, degraded links and transients were exercised, not only silence


def test_a_sample_with_any_trouble_takes_the_port_by_port_path() -> None:
    d = NetworkDetector(error_burst=10)
    up = [RdmaPort(device=f"mlx5_{i}", port=1, tx_bps=1e10) for i in range(4)]
    assert d._quiet(RdmaSample(ts=0.0, node="n", ports=up)) is False  # ports not seen before
    d.observe(RdmaSample(ts=0.0, node="n", ports=up))
    assert d._quiet(RdmaSample(ts=5.0, node="n", ports=up)) is True
    burst = [*up[:3], RdmaPort(device="mlx5_3", port=1, tx_bps=1e10, symbol_errors=10)]
    low = [*up[:3], RdmaPort(device="mlx5_3", port=1, tx_bps=1e9)]
    down = [*up[:3], RdmaPort(device="mlx5_3", port=1, tx_bps=1e10, state="DOWN")]
    for ports in (burst, low, down):
        assert d._quiet(RdmaSample(ts=10.0, node="n", ports=ports)) is False
