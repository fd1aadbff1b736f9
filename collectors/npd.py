"""node-problem-detector as a source: the conditions and events NPD sets on a node, as trainguard records.

A fleet that runs NPD already watches its kernel logs (XIDs included, with
a GPU rule), its file systems and its container runtime. This watcher reads
what NPD wrote to the Kubernetes API for one node through the official
client: each *condition* (sticky, with a transition time: `KernelDeadlock`,
`ReadonlyFilesystem`, a custom GPU condition) becomes a `NodeCondition`
when it is first seen and whenever it changes; each *event* (transient:
`KernelOops`, `TaskHung`, an XID line) becomes a `LogEvent` with source
`node-problem-detector/<monitor>`, so the kernel-log rules (a fatal XID in
the message) apply to it as to a line read from /dev/kmsg.

Never read back as evidence: the kubelet's own conditions (Ready and the
pressures: the kubelet is not a problem detector) and trainguard's own
`TrainguardHealthy`, which act sets when it evicts; reading that back would
turn one eviction into evidence for the next.

Events seen at the first poll are the baseline (they may be days old and
carry no fresh fault), as the kernel log's backlog is; an event counted
again (`count` grows) is new. Reading is split from mapping: `conditions`
and `EventLedger` are pure, `NpdWatcher` is the thin API edge.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Literal

from trainguard.schemas.records import LogEvent, NodeCondition, Record

OWN_CONDITION = "TrainguardHealthy"
KUBELET_CONDITIONS = frozenset({"Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"})
# NPD's monitors (`source.component` of the events it posts) in its stock configs.
NPD_SOURCES = ("kernel-monitor", "system-log-monitor", "custom-plugin-monitor", "docker-monitor",
               "containerd-monitor", "health-checker", "abrt-adaptor", "systemd-monitor")
SOURCE = "node-problem-detector"


def _epoch(value: Any) -> float:
    """A Kubernetes time (a datetime from the client, or RFC 3339 text) as seconds; 0.0 when absent."""
    if value is None:
        return 0.0
    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def conditions(node: str, items: Iterable[Any], now: float, *, job: str = "") -> list[NodeCondition]:
    """A node's problem conditions (client `V1NodeCondition`s) as records; kubelet's and ours left out."""
    out = []
    for c in items:
        if c.type == OWN_CONDITION or c.type in KUBELET_CONDITIONS:
            continue
        status: Literal["True", "False", "Unknown"] = "True" if c.status == "True" else \
            "False" if c.status == "False" else "Unknown"
        out.append(NodeCondition(ts=now, node=node, condition=c.type, status=status, reason=c.reason or "",
                                 message=(c.message or "")[:1000], since=_epoch(c.last_transition_time), job=job))
    return out


class ConditionLedger:
    """Which condition states were already published: each state once, at first sight or on change."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, float, str]] = {}

    def new(self, found: list[NodeCondition]) -> list[NodeCondition]:
        """The records among `found` whose (status, since, reason) changed since the last call."""
        fresh = []
        for c in found:
            state = (c.status, c.since, c.reason)
            if self._seen.get(c.condition) != state:
                self._seen[c.condition] = state
                fresh.append(c)
        return fresh


class EventLedger:
    """NPD's events as `LogEvent`s, each occurrence once; the first poll is the baseline."""

    def __init__(self, sources: Iterable[str] = NPD_SOURCES) -> None:
        self.sources = frozenset(sources)
        self._counts: dict[str, int] | None = None  # event uid -> occurrences already reported

    def new(self, node: str, items: Iterable[Any], now: float, *, job: str = "") -> list[LogEvent]:
        """Events (client `CoreV1Event`s) that occurred since the last call, from NPD's monitors only."""
        baseline = self._counts is None
        counts = self._counts if self._counts is not None else {}
        out = []
        for e in items:
            component = (e.source.component if e.source else "") or e.reporting_component or ""
            if component not in self.sources or e.reason == OWN_CONDITION:
                continue
            uid = e.metadata.uid or f"{e.metadata.namespace}/{e.metadata.name}"
            count = e.count or 1
            if not baseline and count > counts.get(uid, 0):
                level = "error" if e.type == "Warning" else "info"
                out.append(LogEvent(ts=now, node=node, level=level, source=f"{SOURCE}/{component}",
                                    message=f"{e.reason}: {(e.message or '')[:1000]}", job=job, category="npd"))
            counts[uid] = max(count, counts.get(uid, 0))
        self._counts = counts
        return out


class NpdWatcher:
    """Polls one node's conditions and events through the kubernetes client (`CoreV1Api`)."""

    name = "npd"

    def __init__(self, *, node: str, api: Any, job: str = "", sources: Iterable[str] = NPD_SOURCES) -> None:
        self.node = node
        self.job = job
        self._api = api
        self._conditions = ConditionLedger()
        self._events = EventLedger(sources)

    @classmethod
    def connect(cls, *, node: str, kubeconfig: str = "", host: str = "", job: str = "") -> NpdWatcher:
        """Build from an explicit API host, a kubeconfig, or the in-cluster service account."""
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
        return cls(node=node, api=client.CoreV1Api(api_client), job=job)

    def collect(self, now: float) -> list[Record]:
        """New condition states and events of this node. Raises when the API cannot be read (the loop reports it)."""
        status = self._api.read_node_status(self.node, _request_timeout=10)
        found = conditions(self.node, status.status.conditions or [], now, job=self.job)
        events = self._api.list_event_for_all_namespaces(
            field_selector=f"involvedObject.kind=Node,involvedObject.name={self.node}", _request_timeout=10)
        return [*self._conditions.new(found), *self._events.new(self.node, events.items, now, job=self.job)]

    def close(self) -> None:
        """Release the API client's connection pool."""
        api_client = getattr(self._api, "api_client", None)
        if api_client is not None:
            api_client.close()
