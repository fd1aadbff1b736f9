"""Leader election through the real kubernetes client against the FAKE API server.

No API server can run here; tests/fake_kube_api.py serves the Lease
endpoints with real paths and status codes, validates every body against
the V1Lease schema and enforces resourceVersion on updates (409), which is
what makes two candidates unable to both win.
"""

from __future__ import annotations

import threading

from fake_kube_api import FakeKube
from kubernetes import client

from trainguard.streams.act.leader import LeaseElector


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def candidate(kube: FakeKube, who: str, clock: Clock) -> LeaseElector:
    api = client.CoordinationV1Api(client.ApiClient(client.Configuration(host=kube.url)))
    return LeaseElector(api, name="trainguard-act", namespace="trainguard", identity=who, duration_s=15,
                        clock=clock, sleep=lambda s: None)


def test_second_replica_waits_until_the_lease_expires() -> None:
    clock = Clock()
    with FakeKube([], []) as kube:
        a, b = candidate(kube, "act-0", clock), candidate(kube, "act-1", clock)
        assert a.try_acquire_or_renew() is True
        assert b.try_acquire_or_renew() is False
        clock.now += 10
        assert a.try_acquire_or_renew() is True  # renewed
        clock.now += 10
        assert b.try_acquire_or_renew() is False  # 10 s since the renewal: still held
        clock.now += 6
        assert b.try_acquire_or_renew() is True  # expired: taken over
        assert a.try_acquire_or_renew() is False
        spec = kube.leases[("trainguard", "trainguard-act")]["spec"]
        assert spec["holderIdentity"] == "act-1" and spec["leaseTransitions"] == 1
        assert kube.rejected == []


def test_two_candidates_racing_never_both_win() -> None:
    clock = Clock()
    with FakeKube([], []) as kube:
        candidates = [candidate(kube, f"act-{i}", clock) for i in range(4)]
        wins: list[str] = []
        barrier = threading.Barrier(len(candidates))

        def run(c: LeaseElector) -> None:
            barrier.wait()
            if c.try_acquire_or_renew():
                wins.append(c.identity)

        threads = [threading.Thread(target=run, args=(c,)) for c in candidates]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 1
        assert kube.leases[("trainguard", "trainguard-act")]["spec"]["holderIdentity"] == wins[0]


def test_a_leader_that_cannot_renew_gives_up() -> None:
    clock = Clock()
    with FakeKube([], []) as kube:
        a, b = candidate(kube, "act-0", clock), candidate(kube, "act-1", clock)
        assert a.try_acquire_or_renew()
        clock.now += 16
        assert b.try_acquire_or_renew()  # a stalled (e.g. paused) and lost it
        lost = threading.Event()
        a.keep_leading(on_lost=lost.set, every_s=0.01)
        assert lost.wait(5)
        a.stop()


def test_from_env_is_off_without_a_lease_name() -> None:
    assert LeaseElector.from_env({}) is None
    e = LeaseElector.from_env({"LEASE_NAME": "l", "POD_NAME": "act-1", "POD_NAMESPACE": "tg",
                               "LEASE_DURATION_S": "20"}, api=object())
    assert e is not None and (e.name, e.namespace, e.identity, e.duration_s) == ("l", "tg", "act-1", 20.0)
