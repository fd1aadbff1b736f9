"""The API objects the Kubernetes executor writes, built as plain wire-format dicts.

Pure functions, no I/O, so each shape is tested on literals. Every key is
the API's JSON field name (`timeAdded`, `involvedObject`), never the
client's Python attribute name (`time_added`): a merge patch is sent as
written, and the API server drops or rejects names it does not know.
What `kubectl drain` skips is decided here too.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

CONDITION_TYPE = "TrainguardHealthy"
LEMON_CONDITION = "TrainguardLemon"  # True while act holds the node in quarantine (actions.lemons)
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def rfc3339(ts: float) -> str:
    """API timestamp (seconds precision, UTC, `Z`).

    >>> rfc3339(0)
    '1970-01-01T00:00:00Z'
    """
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def label_value(text: str) -> str:
    """`text` as a valid taint/label value (63 chars of [A-Za-z0-9_.-], alphanumeric at both ends).

    >>> label_value("hw_fault"), label_value("xid 79: fell off the bus!")
    ('hw_fault', 'xid-79--fell-off-the-bus')
    """
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", cleaned)


def taint_wire(taint: Any) -> dict[str, Any]:
    """A `V1Taint` as the API spells it; an existing taint keeps its `timeAdded`."""
    out: dict[str, Any] = {"key": taint.key, "effect": taint.effect}
    if taint.value is not None:
        out["value"] = taint.value
    if taint.time_added is not None:
        out["timeAdded"] = rfc3339(taint.time_added.timestamp())
    return out


def taints_without(current: list[Any] | None, key: str) -> list[dict[str, Any]]:
    """The node's taints minus ours, in wire format."""
    return [taint_wire(t) for t in (current or []) if t.key != key]


def node_patch(*, cordon: bool, taints: list[dict[str, Any]], resource_version: str | None) -> dict[str, Any]:
    """The merge patch for spec.unschedulable and spec.taints, with an optimistic-lock precondition.

    A resourceVersion in the patch makes the server answer 409 if someone
    changed the node since we read it, instead of silently overwriting
    their taints.

    >>> node_patch(cordon=True, taints=[], resource_version="7")
    {'metadata': {'resourceVersion': '7'}, 'spec': {'unschedulable': True, 'taints': []}}
    """
    patch: dict[str, Any] = {"spec": {"unschedulable": cordon, "taints": taints}}
    if resource_version:
        patch = {"metadata": {"resourceVersion": resource_version}, **patch}
    return patch


def condition_patch(*, healthy: bool, reason: str, message: str, now: float,
                    previous: Any | None) -> dict[str, Any]:
    """A strategic-merge patch of status.conditions setting `TrainguardHealthy`.

    Like node-problem-detector's conditions: status True/False, a CamelCase
    reason, lastTransitionTime kept while the status does not change.
    """
    status = "True" if healthy else "False"
    kept = previous.last_transition_time if previous is not None and previous.status == status else None
    transition = rfc3339(kept.timestamp() if kept is not None else now)
    return {"status": {"conditions": [{
        "type": CONDITION_TYPE, "status": status, "reason": reason, "message": message[:1024],
        "lastHeartbeatTime": rfc3339(now), "lastTransitionTime": transition}]}}


def lemon_condition_patch(*, quarantined: bool, message: str, now: float) -> dict[str, Any]:
    """A strategic-merge patch of status.conditions setting `TrainguardLemon` (True: quarantined).

    A condition of its own, not a reason on `TrainguardHealthy`: a lemon may be healthy right now
    (its self-check passed) and still be held out, which is exactly what operators need to see.
    """
    return {"status": {"conditions": [{
        "type": LEMON_CONDITION, "status": "True" if quarantined else "False",
        "reason": "RepeatedIncidents" if quarantined else "ReleasedByOperator", "message": message[:1024],
        "lastHeartbeatTime": rfc3339(now), "lastTransitionTime": rfc3339(now)}]}}


def event(*, kind: str, name: str, namespace: str, uid: str | None, event_namespace: str, reason: str,
          message: str, warning: bool, now: float, component: str, instance: str, seq: str) -> dict[str, Any]:
    """A core/v1 Event about one object (`kubectl describe` shows it).

    Node events live in `event_namespace`; pod events in the pod's namespace.
    """
    ref: dict[str, Any] = {"kind": kind, "name": name, "apiVersion": "v1"}
    if namespace:
        ref["namespace"] = namespace
    if uid:
        ref["uid"] = uid
    ts = rfc3339(now)
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{name}.{seq}", "namespace": namespace or event_namespace},
            "involvedObject": ref, "reason": reason, "message": message[:1024],
            "type": "Warning" if warning else "Normal", "count": 1,
            "firstTimestamp": ts, "lastTimestamp": ts,
            "source": {"component": component, "host": instance},
            "reportingComponent": component, "reportingInstance": instance}


def eviction(name: str, namespace: str) -> dict[str, Any]:
    """A policy/v1 Eviction (the API server checks PodDisruptionBudgets before granting it)."""
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}


def skip_reason(pod: Any) -> str:
    """Why `kubectl drain` would leave this pod alone, or "" to evict it.

    Mirror pods are the kubelet's static pods (the API cannot evict them);
    DaemonSet pods would be recreated on the node at once (and include our
    own collectors); finished pods hold no resources.
    """
    meta = pod.metadata
    if MIRROR_ANNOTATION in (meta.annotations or {}):
        return "mirror pod"
    if any(ref.kind == "DaemonSet" for ref in (meta.owner_references or [])):
        return "DaemonSet pod"
    phase = pod.status.phase if pod.status is not None else None
    if phase in ("Succeeded", "Failed"):
        return f"finished ({phase})"
    return ""
