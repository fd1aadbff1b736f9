"""The Helm chart, rendered by the real helm and validated against the Kubernetes schemas.

helm is built from its Go module by `make tools`; the schemas are those
bundled by kubernetes-validate (strict: unknown fields fail). Prometheus
Operator kinds (ServiceMonitor, PodMonitor, PrometheusRule) have no bundled
schema, so their shape is checked here instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from helmchart import CHART, KUBE_VERSION, ROOT, helm, render

from trainguard.cli import build_parser
from trainguard.settings import load_settings

BASE = {"kafka": {"bootstrap": "kafka-bootstrap.kafka.svc:9093"}}
FULL = {
    "kafka": {"bootstrap": "k:9093", "credentials": {"username": "tg", "password": "s3cret"}},
    "signing": {"privateKey": "-----BEGIN PRIVATE KEY-----x", "publicKeys": {"k1.pub": "-----BEGIN PUBLIC KEY-----y"},
                "workerKeyExistingSecret": "tg-worker-key", "consoleKeyExistingSecret": "tg-console-key"},
    "collectors": {"profile": "restricted"},
    "act": {"replicas": 2, "leaderElection": {"enabled": True}, "dryRun": False, "trainingNamespaces": ["team-a", "team-b"], "nodeNames": ["gpu-1"]},
    "monitoring": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
    "alerts": {"enabled": True, "alertmanagerURL": "http://am:9093/api/v2/alerts", "slackURL": "https://hooks/x"},
    "console": {"enabled": True, "credentialsExistingSecret": "console-users"},
    "networkPolicy": {"consoleFrom": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress"}}}]},
}
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


def kinds(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d)
    return out


def pod_specs(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs
            if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet")}


@pytest.mark.parametrize("values", [BASE, FULL], ids=["defaults", "full"])
def test_chart_validates_against_kubernetes_schemas(values: dict[str, Any], tmp_path: Path) -> None:
    docs = render(values, tmp=tmp_path)
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            continue
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
    found = kinds(docs)
    assert {"DaemonSet", "Deployment", "StatefulSet", "Service", "ConfigMap", "ServiceAccount", "ClusterRole",
            "Role", "NetworkPolicy"} <= set(found)
    if values is FULL:
        assert CRD_KINDS <= set(found)
        assert len(found["Secret"]) == 4


def test_a_wrong_field_would_fail_validation() -> None:
    """The validation above can fail: a misspelt field in a Deployment is caught."""
    bad = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
           "spec": {"replica": 2, "selector": {}, "template": {"spec": {"containers": []}}}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBE_VERSION, strict=True)


def test_missing_bootstrap_fails_with_one_clear_line() -> None:
    proc = helm("template", "tg", str(CHART), "--kube-version", KUBE_VERSION)
    assert proc.returncode != 0
    assert "kafka.bootstrap is required" in proc.stderr


def test_two_act_replicas_without_leader_election_are_refused(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="act.replicas > 1 needs act.leaderElection.enabled"):
        render({**BASE, "act": {"replicas": 2}}, tmp=tmp_path)
    env = {e["name"] for d in render(BASE, tmp=tmp_path) if d["kind"] == "StatefulSet"
           for e in d["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "LEASE_NAME" not in env  # off: act runs as before, alone


def test_lint_passes() -> None:
    proc = helm("lint", str(CHART), "--set", "kafka.bootstrap=k:9092", "--kube-version", KUBE_VERSION)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("values", [BASE, FULL], ids=["defaults", "full"])
def test_every_container_command_parses_and_the_config_loads(values: dict[str, Any], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    docs = render(values, tmp=tmp_path)
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["trainguard.yaml"]
    (tmp_path / "trainguard.yaml").write_text(config)
    for name, spec in pod_specs(docs).items():
        for c in spec["containers"]:
            assert c["image"] == "ghcr.io/trainguard/trainguard:0.1.0", name
            args = [str(a) for a in c["args"]]
            parsed = build_parser().parse_args(args)
            assert parsed.config == "/etc/trainguard/config/trainguard.yaml"
            # The rendered config plus the container's TRAINGUARD_* env must load (strict settings).
            for key in [k for k in os.environ if k.startswith("TRAINGUARD_")]:
                monkeypatch.delenv(key)
            for env in c.get("env", []):
                if "value" in env:
                    monkeypatch.setenv(env["name"], str(env["value"]))
            settings = load_settings(tmp_path / "trainguard.yaml")
            assert settings.broker.servers == values["kafka"]["bootstrap"]
            assert settings.actions.rollout.default == "observe"  # a new install observes (act.rollout)
            ports = {p["name"] for p in c.get("ports", [])}
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                if probe in c:
                    assert c[probe]["httpGet"]["port"] in ports, (name, probe)
            if not name.endswith("-alerts"):  # the alert poster serves no HTTP
                assert "livenessProbe" in c and "readinessProbe" in c, name


def is_restricted(spec: dict[str, Any]) -> list[str]:
    """Pod Security 'restricted' violations of a pod spec (the checks that apply to our pods)."""
    problems = []
    if any("hostPath" in v for v in spec.get("volumes", [])):
        problems.append("hostPath volume")
    if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
        problems.append("host namespaces")
    pod_sc = spec.get("securityContext", {})
    for c in spec["containers"]:
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            problems.append("privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append("allowPrivilegeEscalation")
        if not (sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")) or sc.get("runAsUser") == 0:
            problems.append("runs as root")
        if sc.get("capabilities", {}).get("drop") != ["ALL"] or set(sc.get("capabilities", {}).get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append("capabilities")
        if (sc.get("seccompProfile") or pod_sc.get("seccompProfile", {})).get("type") not in ("RuntimeDefault", "Localhost"):
            problems.append("seccomp")
    return problems


def test_pod_security_profiles(tmp_path: Path) -> None:
    default = pod_specs(render(BASE, tmp=tmp_path))
    restricted = pod_specs(render(FULL, tmp=tmp_path))
    assert is_restricted(default["tg-trainguard-worker"]) == []
    assert is_restricted(default["tg-trainguard-act"]) == []
    assert is_restricted(restricted["tg-trainguard-collectors"]) == []
    assert is_restricted(restricted["tg-trainguard-alerts"]) == []
    assert is_restricted(restricted["tg-trainguard-console"]) == []
    # baseline: exactly the documented exceptions, and each is commented in the template
    assert sorted(set(is_restricted(default["tg-trainguard-collectors"]))) == ["capabilities", "hostPath volume",
                                                                               "runs as root"]
    template = (CHART / "templates" / "collectors-daemonset.yaml").read_text().splitlines()
    for needle in ("hostPath: {path: /sys", "hostPath: {path: /dev/kmsg", "hostPath: {path: {{", "add: [SYSLOG]",
                   "runAsUser: 0"):
        line = next(i for i, text in enumerate(template) if needle in text)
        assert any("EXCEPTION (baseline)" in template[j] for j in range(max(0, line - 4), line)), needle


def test_network_policy_limits_each_component(tmp_path: Path) -> None:
    docs = render(FULL, tmp=tmp_path)
    policies = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}
    assert set(policies) == {"tg-trainguard-worker", "tg-trainguard-act", "tg-trainguard-collectors",
                             "tg-trainguard-alerts", "tg-trainguard-console"}
    assert policies.pop("tg-trainguard-alerts")["ingress"] == []
    console = policies.pop("tg-trainguard-console")["ingress"][0]
    assert console["ports"] == [{"protocol": "TCP", "port": 8765}] and console["from"] == FULL["networkPolicy"]["consoleFrom"]
    for name, spec in policies.items():
        assert spec["policyTypes"] == ["Ingress", "Egress"]
        ingress_ports = {p["port"] for rule in spec["ingress"] for p in rule["ports"]}
        assert ingress_ports == ({9401} if "worker" in name else {9403} if "act" in name else {9402})
        api = [r for r in spec["egress"] if any("ipBlock" in t for t in r.get("to", []))]
        assert bool(api) == name.endswith("-act"), name  # only act talks to the API server


def test_prometheus_rule_carries_the_alerts(tmp_path: Path) -> None:
    rule = next(d for d in render(FULL, tmp=tmp_path) if d["kind"] == "PrometheusRule")
    shipped = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    assert rule["spec"] == shipped
    names = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert names == {"TrainguardConsumerLagHigh", "TrainguardDeadLetters", "TrainguardBreakerTripped",
                     "TrainguardStandbyPoolExhausted", "TrainguardJobEttrFalling", "TrainguardCollectorFailing",
                     "TrainguardRulePrecisionLow"}
    metrics_sources = "".join((ROOT / p).read_text() for p in
                              ("streams/worker/metrics.py", "streams/act/metrics.py", "collectors/metrics.py"))
    for group in rule["spec"]["groups"]:
        for r in group["rules"]:
            for metric in {w for w in r["expr"].replace("(", " ").replace(")", " ").split() if w.startswith("trainguard_")}:
                base = metric.split("{")[0].split("[")[0].removesuffix("_total")
                assert base in metrics_sources, f"{r['alert']}: {base} is not a metric trainguard exports"


def test_slack_url_only_in_a_secret(tmp_path: Path) -> None:
    docs = render(FULL, tmp=tmp_path)
    deployment = next(d for d in docs if d["metadata"]["name"] == "tg-trainguard-alerts" and d["kind"] == "Deployment")
    assert "https://hooks/x" not in yaml.safe_dump(deployment)
    secret = next(d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "tg-trainguard-slack")
    assert secret["stringData"] == {"url": "https://hooks/x"}


def test_act_is_one_statefulset_with_a_journal_volume_and_lease(tmp_path: Path) -> None:
    docs = render(FULL, tmp=tmp_path)
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    assert sts["spec"]["replicas"] == 2
    assert sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "journal"
    env = {e["name"] for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert {"LEASE_NAME", "POD_NAME", "POD_NAMESPACE"} <= env
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--dry-run" not in args


def test_baseline_collectors_mount_what_the_collectors_read(tmp_path: Path) -> None:
    ds = next(d for d in render(BASE, tmp=tmp_path) if d["kind"] == "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert paths == {"host-sys": "/sys", "kmsg": "/dev/kmsg", "spool": "/var/lib/trainguard"}
    container = spec["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["TRAINGUARD_COLLECTORS__RDMA_ROOT"]["value"] == "/host/sys/class/infiniband"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["host-sys"] == "/host/sys" and mounts["kmsg"] == "/dev/kmsg"
    assert int(env["TRAINGUARD_METRICS__PORT"]["value"]) == container["ports"][0]["containerPort"]
    assert spec["automountServiceAccountToken"] is False


def test_every_value_is_documented_in_the_chart_readme() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    missing = []
    for top, sub in values.items():
        keys = [top] if not isinstance(sub, dict) or not sub else [f"{top}.{k}" for k in sub]
        for key in keys:
            leaf = key.split(".")[-1]
            if f"`{key}" not in readme and f".{leaf}`" not in readme and f"`.{leaf}" not in readme \
                    and f", `.{leaf}" not in readme:
                missing.append(key)
    assert missing == []


def test_dcgm_exporter_source_needs_no_nvidia_runtime_and_npd_reads_only(tmp_path: Path) -> None:
    values = {**FULL, "collectors": {"profile": "restricted", "gpuSource": "dcgm-exporter", "npd": {"enabled": True}}}
    docs = render(values, tmp=tmp_path)
    spec = pod_specs(docs)["tg-trainguard-collectors"]
    assert is_restricted(spec) == [] and "runtimeClassName" not in spec
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert "NVIDIA_VISIBLE_DEVICES" not in env and env["TRAINGUARD_COLLECTORS__GPU_SOURCE"]["value"] == "dcgm-exporter"
    assert env["NODE_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    assert env["TRAINGUARD_COLLECTORS__DCGM_EXPORTER_URL"]["value"] == "http://$(NODE_IP):9400/metrics"
    assert env["TRAINGUARD_COLLECTORS__NPD"]["value"] == "true" and spec["automountServiceAccountToken"] is True
    [role] = [d for d in kinds(docs)["ClusterRole"] if d["metadata"]["name"] == "tg-trainguard-collectors-npd"]
    assert {(r["resources"][0], v) for r in role["rules"] for v in r["verbs"]} == {("nodes/status", "get"),
                                                                                   ("events", "list")}
    assert spec["serviceAccountName"] == "tg-trainguard-collectors"
    with pytest.raises(Exception, match="gpuSource"):
        render({**FULL, "collectors": {"gpuSource": "smi"}}, tmp=tmp_path)


def test_worker_and_console_keys_reach_only_their_pods_and_act_verifies_with_their_public_keys(
        tmp_path: Path) -> None:
    docs = render(FULL, tmp=tmp_path)
    pods = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs
            if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet")}

    def env(name: str) -> dict[str, str]:
        return {e["name"]: e.get("value", "") for e in pods[name]["containers"][0].get("env", [])}

    def secrets(name: str) -> set[str]:
        return {v["secret"]["secretName"] for v in pods[name]["volumes"] if "secret" in v}

    assert env("tg-trainguard-worker")["TRAINGUARD_SECURITY__WORKER_PRIVATE_KEY"] == "/etc/trainguard/worker-key/worker.key"
    assert env("tg-trainguard-console")["TRAINGUARD_SECURITY__CONSOLE_PRIVATE_KEY"] == \
        "/etc/trainguard/console-key/console.key"
    act = env("tg-trainguard-act")
    assert act["TRAINGUARD_SECURITY__WORKER_PUBLIC_KEYS"] == '["/etc/trainguard/public-keys/worker.pub"]'
    assert act["TRAINGUARD_SECURITY__CONSOLE_PUBLIC_KEYS"] == '["/etc/trainguard/public-keys/console.pub"]'
    holders = {name for name in pods if secrets(name) & {"tg-worker-key", "tg-console-key"}}
    assert holders == {"tg-trainguard-worker", "tg-trainguard-console"}  # act and the collectors never get them
    assert "tg-worker-key" in secrets("tg-trainguard-worker") and "tg-console-key" in secrets("tg-trainguard-console")
