"""The Kubernetes executor: cordon, taint, drain and mark nodes the way operators' tools do.

Eviction here is what `kubectl drain` does, plus what node-problem-detector
users expect to see:
  - cordon (spec.unschedulable) and taint the node, with an optimistic lock so
    a concurrent edit of its taints is retried rather than overwritten;
  - evict its pods through the Eviction API, which honours
    PodDisruptionBudgets: a 429 means "not now", retried with backoff until
    the deadline; mirror, DaemonSet and finished pods are skipped;
  - wait until the evicted pods are gone, with a timeout;
  - set the node condition `TrainguardHealthy` and record an Event on the node
    and on every evicted pod, so `kubectl describe` tells the story.
Uncordoning removes our taint and sets the condition back to True. A lemon
node (`actions.lemons`) gets its own condition, `TrainguardLemon`, and an
Event (`mark_lemon`). Only
cluster-level verbs live here; restarts and self-checks go to the node
agents. Permissions: deploy/helm/trainguard/templates/rbac.yaml. Object
shapes: actions/executors/kubernetes_objects.py.
"""

from __future__ import annotations

import secrets
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainguard.actions.executors import kubernetes_objects as objects
from trainguard.actions.executors.base import K8S_NODE, Clock, invalid_nodes, refused
from trainguard.schemas.actions import CLUSTER_ACTIONS
from trainguard.schemas.records import ActionCommand, ActionResult

if TYPE_CHECKING:
    from trainguard.actions.executors.registry import ExecutorContext


class DrainError(Exception):
    """The node could not be drained in time (PDB still blocking, pods still running)."""


class KubernetesExecutor:
    """Cluster verbs against a Kubernetes API server."""

    name = "kubernetes"
    handles = CLUSTER_ACTIONS

    def __init__(self, *, api: Any, clock: Clock, sleep: Callable[[float], None] = time.sleep,
                 taint_key: str = "trainguard.io/evicted", pod_label_selector: str = "",
                 namespaces: list[str] | tuple[str, ...] = (), event_namespace: str = "default",
                 eviction_timeout_s: float = 300.0, backoff_max_s: float = 30.0, poll_s: float = 1.0) -> None:
        self.api = api  # a kubernetes.client.CoreV1Api
        self.clock = clock
        self.sleep = sleep
        self.taint_key = taint_key
        self.pod_label_selector = pod_label_selector
        self.namespaces = list(namespaces)  # empty: pods of every namespace (needs a cluster-wide list)
        self.event_namespace = event_namespace
        self.eviction_timeout_s = eviction_timeout_s
        self.backoff_max_s = backoff_max_s
        self.poll_s = poll_s
        self.instance = socket.gethostname()

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

    @classmethod
    def from_context(cls, ctx: ExecutorContext) -> KubernetesExecutor:
        """Build from the `actions.kubernetes` settings section (the registry's entry)."""
        k = ctx.settings.kubernetes
        return cls.connect(kubeconfig=k.kubeconfig, host=k.host, clock=ctx.clock, taint_key=k.taint_key,
                           pod_label_selector=k.pod_label_selector, namespaces=k.namespaces,
                           event_namespace=k.event_namespace, eviction_timeout_s=k.eviction_timeout_s)

    def execute(self, command: ActionCommand, *, targets: list[str]) -> ActionResult:
        """Cordon+taint+drain, cordon, or uncordon each target node."""
        from kubernetes.client.exceptions import ApiException

        if why := invalid_nodes(targets or command.nodes, K8S_NODE):
            return refused(command, why, ts=self.clock())
        reason = command.params.reason or command.action
        note = f"trainguard {command.action}: {reason} (incident {command.incident_id or '-'}, command {command.id})"
        done: dict[str, Any] = {}
        try:
            for node in targets or command.nodes:
                if command.action == "uncordon_node":
                    self._mark(node, cordon=False, why="Recovered", note=note)
                    done[node] = "uncordoned"
                    continue
                self._mark(node, cordon=True, why=_camel(reason), note=note, reason=reason)
                done[node] = {"cordoned": True, "evicted_pods": [], "skipped_pods": {}}
                if command.action == "evict_node":
                    self._drain(node, note, done[node])
        except ApiException as exc:
            return self._result(command, "failed", f"kubernetes API: {exc.status} {exc.reason}", done)
        except DrainError as exc:
            return self._result(command, "failed", str(exc), done)
        return self._result(command, "ok", f"{command.action} on {', '.join(done)}", done)

    # --- node --------------------------------------------------------------------------------

    def _mark(self, node: str, *, cordon: bool, why: str, note: str, reason: str = "") -> None:
        """Cordon/uncordon + our taint, then the condition and an Event on the node."""
        from kubernetes.client.exceptions import ApiException

        for attempt in range(5):
            current = self.api.read_node(node)
            taints = objects.taints_without(current.spec.taints, self.taint_key)
            if cordon:
                taints.append({"key": self.taint_key, "value": objects.label_value(reason), "effect": "NoSchedule"})
            patch = objects.node_patch(cordon=cordon, taints=taints,
                                       resource_version=current.metadata.resource_version)
            try:
                self.api.patch_node(node, patch)
                break
            except ApiException as exc:
                if exc.status != 409 or attempt == 4:
                    raise  # 409: the node changed since we read it; read again
        previous = next((c for c in (current.status.conditions or []) if c.type == objects.CONDITION_TYPE), None) \
            if current.status is not None else None
        self.api.patch_node_status(node, objects.condition_patch(
            healthy=not cordon, reason=why if cordon else "Recovered", message=note, now=self.clock(),
            previous=previous))
        # uid = the node's name, as the kubelet and node-problem-detector record it: `kubectl describe
        # node` searches Events by that, not by the Node object's uid.
        self._event(kind="Node", name=node, namespace="", uid=node,
                    reason="TrainguardCordon" if cordon else "TrainguardUncordon", message=note, warning=cordon)

    def mark_lemon(self, node: str, *, quarantined: bool, reason: str) -> dict[str, Any]:
        """Set the node's `TrainguardLemon` condition and record an Event (`kubectl describe node` shows both).

        The cordon from the eviction stays as it was: a release lifts the quarantine, not the cordon,
        which goes with the node's return to the pool.
        """
        if why := invalid_nodes([node], K8S_NODE):
            raise ValueError(why)
        note = f"trainguard lemon: {reason}" if quarantined else f"trainguard lemon quarantine lifted: {reason}"
        self.api.patch_node_status(node, objects.lemon_condition_patch(quarantined=quarantined, message=note,
                                                                       now=self.clock()))
        self._event(kind="Node", name=node, namespace="", uid=node, warning=quarantined, message=note,
                    reason="TrainguardLemon" if quarantined else "TrainguardLemonReleased")
        return {"condition": objects.LEMON_CONDITION, "status": "True" if quarantined else "False", "event": True}

    # --- pods --------------------------------------------------------------------------------

    def _pods_on(self, node: str) -> list[Any]:
        selector = {"field_selector": f"spec.nodeName={node}", "label_selector": self.pod_label_selector or None}
        if not self.namespaces:
            return list(self.api.list_pod_for_all_namespaces(**selector).items)
        return [p for ns in self.namespaces for p in self.api.list_namespaced_pod(ns, **selector).items]

    def _drain(self, node: str, note: str, report: dict[str, Any]) -> None:
        """Evict every evictable pod on the node, then wait until they are gone."""
        deadline = self.clock() + self.eviction_timeout_s
        waiting: set[str] = set()
        for pod in self._pods_on(node):
            meta = pod.metadata
            ref = f"{meta.namespace}/{meta.name}"
            why = objects.skip_reason(pod)
            if why:
                report["skipped_pods"][ref] = why
                continue
            if meta.deletion_timestamp is None:
                self._evict(meta.name, meta.namespace, deadline)
                self._event(kind="Pod", name=meta.name, namespace=meta.namespace, uid=meta.uid,
                            reason="TrainguardEvicted", message=f"{note}; node {node}", warning=True)
            report["evicted_pods"].append(ref)
            waiting.add(ref)
        self._wait_gone(node, waiting, deadline)

    def _evict(self, name: str, namespace: str, deadline: float) -> None:
        """POST an Eviction; on 429 (a PodDisruptionBudget says not now) back off and retry."""
        from kubernetes.client.exceptions import ApiException

        delay = 1.0
        while True:
            try:
                self.api.create_namespaced_pod_eviction(name, namespace, objects.eviction(name, namespace))
                return
            except ApiException as exc:
                if exc.status == 404:
                    return  # already gone
                if exc.status != 429:
                    raise
                if self.clock() + delay > deadline:
                    raise DrainError(f"eviction of {namespace}/{name} still refused after "
                                     f"{self.eviction_timeout_s:g}s (PodDisruptionBudget)") from None
                self.sleep(delay)
                delay = min(delay * 2, self.backoff_max_s)

    def _wait_gone(self, node: str, waiting: set[str], deadline: float) -> None:
        while waiting:
            present = {f"{p.metadata.namespace}/{p.metadata.name}" for p in self._pods_on(node)}
            waiting &= present
            if not waiting:
                return
            if self.clock() >= deadline:
                raise DrainError(f"pods still on {node} after {self.eviction_timeout_s:g}s: "
                                 f"{', '.join(sorted(waiting))}")
            self.sleep(self.poll_s)

    # --- events ------------------------------------------------------------------------------

    def _event(self, *, kind: str, name: str, namespace: str, uid: str | None, reason: str, message: str,
               warning: bool) -> None:
        body = objects.event(kind=kind, name=name, namespace=namespace, uid=uid,
                             event_namespace=self.event_namespace, reason=reason, message=message,
                             warning=warning, now=self.clock(), component="trainguard-act",
                             instance=self.instance, seq=secrets.token_hex(8))
        self.api.create_namespaced_event(body["metadata"]["namespace"], body)

    def _result(self, command: ActionCommand, status: str, message: str, details: dict[str, Any]) -> ActionResult:
        return ActionResult(ts=self.clock(), command_id=command.id, action=command.action,
                            status=status, message=message, job=command.job, details={"nodes": details})  # type: ignore[arg-type]


def _camel(reason: str) -> str:
    """A condition/taint reason in the API's CamelCase style: "hw_fault" -> "HwFault".

    >>> _camel("hw_fault"), _camel("")
    ('HwFault', 'Trainguard')
    """
    return "".join(part.capitalize() for part in reason.replace("-", "_").split("_") if part) or "Trainguard"
