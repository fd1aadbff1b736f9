"""Leader election on a Kubernetes Lease, so only one `trainguard act` acts at a time.

`act` runs as a StatefulSet; with more than one replica the others must
wait, not act, or two consumers could evict the same fleet twice. This is
client-go's leader-election protocol on a coordination.k8s.io/v1 Lease:
the holder renews `renewTime` well within `leaseDurationSeconds`; a
candidate takes the Lease over only after it expired; every write carries
the resourceVersion it read, so two candidates can never both win.
A leader that cannot renew in time stops itself (`on_lost`) rather than
risk acting beside a new leader.

`trainguard act` waits here, after serving its metrics (a standby is
alive) and before it consumes anything, when LEASE_NAME is set (the chart
sets it with POD_NAME and POD_NAMESPACE when act.leaderElection.enabled).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any


def micro_time(ts: float) -> str:
    """A Lease's MicroTime.

    >>> micro_time(0.5)
    '1970-01-01T00:00:00.500000Z'
    """
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """One candidate for the Lease `namespace/name`."""

    def __init__(self, api: Any, *, name: str, namespace: str, identity: str, duration_s: float = 15.0,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep) -> None:
        self.api = api  # a kubernetes.client.CoordinationV1Api
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.duration_s = duration_s
        self.clock = clock
        self.sleep = sleep
        self.last_renew = 0.0
        self._stop = threading.Event()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, api: Any = None,
                 kube: Any = None) -> LeaseElector | None:
        """From LEASE_NAME, LEASE_DURATION_S, POD_NAME, POD_NAMESPACE; None when LEASE_NAME is unset.

        The API server is reached like the Kubernetes executor reaches it:
        `kube` (the actions.kubernetes settings) may name a host or a
        kubeconfig; otherwise the in-cluster service account is used.
        """
        env = os.environ if env is None else env
        if not env.get("LEASE_NAME"):
            return None
        if api is None:
            from kubernetes import client, config

            if kube is not None and kube.host:
                api_client = client.ApiClient(client.Configuration(host=kube.host))
            elif kube is not None and kube.kubeconfig:
                api_client = config.new_client_from_config(config_file=kube.kubeconfig)
            else:
                config.load_incluster_config()
                api_client = client.ApiClient()
            api = client.CoordinationV1Api(api_client)
        return cls(api, name=env["LEASE_NAME"], namespace=env.get("POD_NAMESPACE", "default"),
                   identity=env.get("POD_NAME") or os.uname().nodename,
                   duration_s=float(env.get("LEASE_DURATION_S", "15")))

    def try_acquire_or_renew(self) -> bool:
        """One round: True if we hold the Lease afterwards."""
        from kubernetes.client.exceptions import ApiException

        now = self.clock()
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            return self._write(None, now, transitions=0, acquired=now)
        spec = lease.spec
        holder = spec.holder_identity or ""
        renewed = spec.renew_time.timestamp() if spec.renew_time else 0.0
        duration = spec.lease_duration_seconds or self.duration_s
        if holder == self.identity:
            acquired = spec.acquire_time.timestamp() if spec.acquire_time else now
            return self._write(lease, now, transitions=spec.lease_transitions or 0, acquired=acquired)
        if holder and renewed + duration > now:
            return False  # someone else holds an unexpired lease
        return self._write(lease, now, transitions=(spec.lease_transitions or 0) + 1, acquired=now)

    def _write(self, current: Any, now: float, *, transitions: int, acquired: float) -> bool:
        from kubernetes.client.exceptions import ApiException

        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.duration_s),
                     "acquireTime": micro_time(acquired), "renewTime": micro_time(now),
                     "leaseTransitions": transitions}}
        try:
            if current is None:
                self.api.create_namespaced_lease(self.namespace, body)
            else:
                body["metadata"]["resourceVersion"] = current.metadata.resource_version
                self.api.replace_namespaced_lease(self.name, self.namespace, body)
        except ApiException as exc:
            if exc.status == 409:
                return False  # another candidate wrote first
            raise
        self.last_renew = now
        return True

    def wait_until_leader(self, *, retry_s: float | None = None) -> None:
        """Block until this candidate holds the Lease."""
        while not self.try_acquire_or_renew():
            self.sleep(retry_s if retry_s is not None else max(self.duration_s / 5, 0.2))

    def keep_leading(self, *, on_lost: Callable[[], None], every_s: float | None = None) -> threading.Thread:
        """Renew in a daemon thread; call `on_lost` once if the Lease cannot be renewed in time."""
        period = every_s if every_s is not None else self.duration_s / 3

        def renew() -> None:
            while not self._stop.wait(period):
                try:
                    ok = self.try_acquire_or_renew()
                except Exception:  # noqa: BLE001 - an unreachable API server is "not renewed"
                    ok = False
                if not ok and self.clock() - self.last_renew >= self.duration_s * 2 / 3:
                    on_lost()
                    return

        thread = threading.Thread(target=renew, name="lease-renew", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        """Stop renewing (the Lease then expires for the next candidate)."""
        self._stop.set()
