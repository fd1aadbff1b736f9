"""The Kubernetes executor: cordon, taint and evict through the official client.

Eviction here means what an SRE would do by hand: mark the node
unschedulable (cordon), taint it so nothing tolerating ordinary taints lands
there again, and evict its training pods through the Eviction API (which
honours PodDisruptionBudgets, unlike a delete). Uncordoning removes both.
Only cluster-level verbs live here; restarts and self-checks go to the node
agents. The required permissions are in `deploy/rbac/`.
"""

from __future__ import annotations

from typing import Any

from actions.executors.base import K8S_NODE, Clock, invalid_nodes, refused
from schemas.records import ActionCommand, ActionResult


class KubernetesExecutor:
    """Cluster verbs against a Kubernetes API server."""

    name = "kubernetes"
    handles = frozenset({"evict_node", "cordon_node", "uncordon_node"})

    def __init__(self, *, api: Any, clock: Clock, taint_key: str = "trainguard.io/evicted",
                 pod_label_selector: str = "") -> None:
        self.api = api  # a kubernetes.client.CoreV1Api
        self.clock = clock
        self.taint_key = taint_key
        self.pod_label_selector = pod_label_selector

    @classmethod
    def connect(cls, *, kubeconfig: str, host: str, clock: Clock, **kw: Any) -> KubernetesExecutor:
        """Build from a kubeconfig, the in-cluster config, or an explicit host."""
        from kubernetes import client, config

        if host:
            cfg = client.Configuration()
            cfg.host = host
            api_client = client.ApiClient(cfg)
        elif kubeconfig:
            api_client = config.new_client_from_config(config_file=kubeconfig)
        else:
            config.load_incluster_config()
            api_client = client.ApiClient()
        return cls(api=client.CoreV1Api(api_client), clock=clock, **kw)

    def execute(self, command: ActionCommand, *, targets: list[str]) -> ActionResult:
        """Cordon+taint+evict, cordon, or uncordon each target node."""
        from kubernetes.client.exceptions import ApiException

        if why := invalid_nodes(targets or command.nodes, K8S_NODE):
            return refused(command, why, ts=self.clock())
        done: dict[str, Any] = {}
        try:
            for node in targets or command.nodes:
                if command.action == "uncordon_node":
                    self._uncordon(node)
                    done[node] = "uncordoned"
                    continue
                self._cordon(node, reason=str(command.params.get("reason", command.action)))
                done[node] = {"cordoned": True, "evicted_pods": []}
                if command.action == "evict_node":
                    done[node]["evicted_pods"] = self._evict_pods(node)
        except ApiException as exc:
            return self._result(command, "failed", f"kubernetes API: {exc.status} {exc.reason}", done)
        return self._result(command, "ok", f"{command.action} on {', '.join(done)}", done)

    def _cordon(self, node: str, *, reason: str) -> None:
        current = self.api.read_node(node)
        taints = [t.to_dict() for t in (current.spec.taints or []) if t.key != self.taint_key]
        taints.append({"key": self.taint_key, "value": reason, "effect": "NoSchedule"})
        self.api.patch_node(node, {"spec": {"unschedulable": True, "taints": taints}})

    def _uncordon(self, node: str) -> None:
        current = self.api.read_node(node)
        taints = [t.to_dict() for t in (current.spec.taints or []) if t.key != self.taint_key]
        self.api.patch_node(node, {"spec": {"unschedulable": False, "taints": taints}})

    def _evict_pods(self, node: str) -> list[str]:
        from kubernetes import client

        pods = self.api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}",
                                                    label_selector=self.pod_label_selector or None)
        evicted = []
        for pod in pods.items:
            meta = pod.metadata
            if any(ref.kind == "DaemonSet" for ref in (meta.owner_references or [])):
                continue  # node daemons (and our own agent) stay
            body = client.V1Eviction(api_version="policy/v1", kind="Eviction", metadata=client.V1ObjectMeta(name=meta.name, namespace=meta.namespace))
            self.api.create_namespaced_pod_eviction(meta.name, meta.namespace, body)
            evicted.append(f"{meta.namespace}/{meta.name}")
        return evicted

    def _result(self, command: ActionCommand, status: str, message: str, details: dict[str, Any]) -> ActionResult:
        return ActionResult(ts=self.clock(), command_id=command.id, action=command.action,
                            status=status, message=message, job=command.job, details={"nodes": details})  # type: ignore[arg-type]
