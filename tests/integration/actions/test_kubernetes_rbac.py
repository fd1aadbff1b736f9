"""The chart's RBAC grants exactly what the Kubernetes executor uses, and no more.

The chart is rendered by the real helm (`make tools`); the executor and the
Lease elector (streams/act/leader.py) run
through the real client against the FAKE API server (fake_kube_api.py).
Each recorded request is authorised the way the API server's RBAC
authoriser does (ClusterRoleBindings anywhere, RoleBindings in their
namespace, resourceNames), so a missing rule fails here, and each granted
rule must be exercised by some request.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from helmchart import render
from kubernetes import client

from trainguard.actions.executors.kubernetes import KubernetesExecutor
from trainguard.schemas.action_params import NoParams
from trainguard.schemas.records import ActionCommand
from trainguard.streams.act.leader import LeaseElector

VERBS = {"GET": "get", "PATCH": "patch", "POST": "create", "PUT": "update"}


def attributes(verb: str, path: str) -> tuple[str, str, str | None, str | None, str]:
    """(apiGroup, resource[/sub], namespace, name, verb) of one request, as RBAC sees it."""
    m = re.fullmatch(r"/apis?/(?:(?P<group>[^/]+)/)?v1(?:/namespaces/(?P<ns>[^/]+))?/(?P<res>[^/]+)"
                     r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?", path)
    assert m, path
    group = "" if path.startswith("/api/") else (m["group"] or "")
    resource = m["res"] + (f"/{m['sub']}" if m["sub"] else "")
    rbac_verb = "list" if verb == "GET" and m["name"] is None else VERBS[verb]
    return group, resource, m["ns"], m["name"], rbac_verb


def allowed(rules: list[tuple[str | None, dict[str, Any]]], req: tuple[str, str, str | None, str | None, str]) -> list[int]:
    """Indexes of the rules that allow `req`; rules carry the namespace they apply in (None: cluster-wide)."""
    group, resource, ns, name, verb = req
    hits = []
    for i, (where, rule) in enumerate(rules):
        if where is not None and where != ns:
            continue
        if group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
            if "resourceNames" in rule and (name not in rule["resourceNames"] or verb in ("create", "list")):
                continue
            hits.append(i)
    return hits


def bound_rules(docs: list[dict[str, Any]], sa: str) -> list[tuple[str | None, dict[str, Any]]]:
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs
             if d["kind"] in ("Role", "ClusterRole")}
    rules: list[tuple[str | None, dict[str, Any]]] = []
    for b in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if not any(s["kind"] == "ServiceAccount" and s["name"] == sa for s in b["subjects"]):
            continue
        ns = b["metadata"].get("namespace") if b["kind"] == "RoleBinding" else None
        ref = b["roleRef"]
        role = roles[(ref["kind"], ns if ref["kind"] == "Role" else None, ref["name"])]
        rules += [(ns, r) for r in role["rules"]]
    return rules


def command(action: str) -> ActionCommand:
    return ActionCommand(ts=1.0, id="c1", action=action, job="llm", nodes=["gpu-1"],  # type: ignore[arg-type]
                         params=NoParams(reason="hw_fault"), incident_id="i1")


@pytest.mark.parametrize("namespaces", [[], ["team-a"]], ids=["cluster-wide", "namespaced"])
def test_chart_rbac_allows_every_request_and_grants_nothing_unused(namespaces: list[str], tmp_path: Path,
                                                                   fake_kube: Any, kube_pod: Any) -> None:
    values = {"kafka": {"bootstrap": "k:9092"}, "act": {"trainingNamespaces": namespaces, "nodeNames": ["gpu-1"]}}
    docs = render(values, tmp=tmp_path)
    rules = bound_rules(docs, "tg-trainguard-act")
    pods = [kube_pod("trainer-0", "gpu-1", namespace="team-a")]
    with fake_kube(["gpu-1"], pods) as kube:
        ex = KubernetesExecutor.connect(kubeconfig="", host=kube.url, clock=lambda: 2.0, sleep=lambda s: None,
                                        namespaces=namespaces, event_namespace="trainguard")
        assert ex.execute(command("evict_node"), targets=["gpu-1"]).status == "ok"
        assert ex.execute(command("uncordon_node"), targets=["gpu-1"]).status == "ok"
        lease = client.CoordinationV1Api(client.ApiClient(client.Configuration(host=kube.url)))
        elector = LeaseElector(lease, name="trainguard-act", namespace="trainguard", identity="act-0")
        assert elector.try_acquire_or_renew() and elector.try_acquire_or_renew()  # create, then get + update
    used: set[int] = set()
    for verb, path, *_ in kube.requests:
        hits = allowed(rules, attributes(verb, path))
        assert hits, f"RBAC denies {verb} {path}"
        used.update(hits)
    unused = [rules[i][1] for i in range(len(rules)) if i not in used]
    assert unused == [], f"granted but never used: {unused}"
    cluster_wide = {(r["resources"][0], v) for ns, r in rules if ns is None for v in r["verbs"]}
    if namespaces:
        assert cluster_wide == {("nodes", "get"), ("nodes", "patch"), ("nodes/status", "patch")}


def test_a_node_outside_node_names_is_denied(tmp_path: Path) -> None:
    docs = render({"kafka": {"bootstrap": "k:9092"}, "act": {"nodeNames": ["gpu-1"]}}, tmp=tmp_path)
    rules = bound_rules(docs, "tg-trainguard-act")
    assert allowed(rules, attributes("PATCH", "/api/v1/nodes/gpu-1"))
    assert not allowed(rules, attributes("PATCH", "/api/v1/nodes/login-1"))


def test_namespaced_mode_denies_other_namespaces(tmp_path: Path) -> None:
    docs = render({"kafka": {"bootstrap": "k:9092"}, "act": {"trainingNamespaces": ["team-a"]}}, tmp=tmp_path)
    rules = bound_rules(docs, "tg-trainguard-act")
    assert allowed(rules, attributes("POST", "/api/v1/namespaces/team-a/pods/x/eviction"))
    assert not allowed(rules, attributes("POST", "/api/v1/namespaces/prod/pods/x/eviction"))
    assert not allowed(rules, attributes("GET", "/api/v1/pods"))
