"""A FAKE Kubernetes API server at the HTTP boundary, for the executor and leader-election tests.

No Kubernetes API server can run on this machine, so the real `kubernetes`
client talks HTTP to this fake. It implements the endpoints trainguard
uses, with the real paths, verbs, content types, status codes and object
shapes of core/v1, policy/v1 and coordination.k8s.io/v1:

  GET/PATCH /api/v1/nodes/{name}, PATCH /api/v1/nodes/{name}/status
  GET /api/v1/pods, GET /api/v1/namespaces/{ns}/pods   (fieldSelector spec.nodeName, labelSelector)
  POST /api/v1/namespaces/{ns}/pods/{name}/eviction     (429 while a PDB blocks)
  POST /api/v1/namespaces/{ns}/events, GET /api/v1/events   (fieldSelector involvedObject.kind/.name)
  GET/POST/PUT /apis/coordination.k8s.io/v1/namespaces/{ns}/leases[/{name}]

What makes it a useful fake rather than a mock: every request body is
validated against the API schema, taken from the client library's own
generated models (`attribute_map` gives each field's wire name,
`openapi_types` its type), as a server with fieldValidation=Strict does. A
snake_case field such as `time_added`, an unknown field or a wrongly typed
value is answered 400 with the field's path. Patches follow
strategic-merge semantics for what we send (conditions merge by `type`,
other lists are replaced) and honour a `metadata.resourceVersion`
precondition with 409. Every request is recorded.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from kubernetes import client as k8s

_PRIMITIVES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "bool": (bool,), "float": (int, float),
                                             "object": (object,)}


def schema_errors(value: Any, type_name: str, path: str = "") -> list[str]:
    """Every way `value` (a JSON body) departs from the API type `type_name`; [] if none."""
    if value is None:
        return []
    if type_name.startswith("List["):
        if not isinstance(value, list):
            return [f"{path}: expected a list"]
        return [e for i, item in enumerate(value) for e in schema_errors(item, type_name[5:-1], f"{path}[{i}]")]
    if type_name.startswith("Dict[str, "):
        if not isinstance(value, dict):
            return [f"{path}: expected an object"]
        return [e for k, v in value.items() for e in schema_errors(v, type_name[10:-1], f"{path}.{k}")]
    if type_name == "datetime":
        try:
            datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return [f"{path}: not an RFC 3339 time: {value!r}"]
        return [] if isinstance(value, str) else [f"{path}: expected a time string"]
    if type_name in _PRIMITIVES:
        ok = isinstance(value, _PRIMITIVES[type_name]) and not (type_name == "int" and isinstance(value, bool))
        return [] if ok else [f"{path}: expected {type_name}, got {type(value).__name__}"]
    model = getattr(k8s, type_name, None)
    if model is None or not hasattr(model, "attribute_map"):
        return [] if isinstance(value, str) else [f"{path}: expected a string ({type_name})"]
    if not isinstance(value, dict):
        return [f"{path}: expected an object ({type_name})"]
    by_wire = {wire: py for py, wire in model.attribute_map.items()}
    errors = []
    for key, item in value.items():
        if key.startswith("$"):
            continue  # strategic-merge directives ($patch, $retainKeys, $setElementOrder/...)
        if key not in by_wire:
            errors.append(f'unknown field "{(path + "." if path else "") + key}"')
            continue
        errors += schema_errors(item, model.openapi_types[by_wire[key]], f"{path}.{key}" if path else key)
    return errors


def merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """Strategic merge, as far as our patches need: `conditions` merge by `type`, other lists replace."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        elif key == "conditions" and isinstance(value, list):
            current = {c["type"]: c for c in target.get(key, [])}
            for cond in value:
                current.setdefault(cond["type"], {}).update(cond)
            target[key] = list(current.values())
        else:
            target[key] = value


def status(code: int, message: str, reason: str) -> dict[str, Any]:
    """A `Status` object, as the API server sends with every error."""
    return {"apiVersion": "v1", "kind": "Status", "status": "Failure", "message": message, "reason": reason,
            "code": code, "metadata": {}}


class FakeKube:
    """State (nodes, pods, events, leases), behaviours, and a server thread."""

    def __init__(self, nodes: list[str], pods: list[dict[str, Any]]) -> None:
        self.nodes: dict[str, dict[str, Any]] = {n: self._node(n) for n in nodes}
        self.pods = pods
        self.events: list[dict[str, Any]] = []
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[tuple[str, str, Any, str]] = []
        self.rejected: list[str] = []  # schema errors answered with 400
        self.pdb_blocks: dict[str, int] = {}  # "ns/name" -> how many evictions get 429 first
        self.linger: dict[str, int] = {}  # "ns/name" -> list calls it stays (terminating) after eviction
        self.conflicts = 0  # the next N node patches find the node changed (409), as under a concurrent writer
        self.lock = threading.Lock()
        self._rv = 100
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake._handle(self, "GET")

            def do_PATCH(self) -> None:
                fake._handle(self, "PATCH")

            def do_POST(self) -> None:
                fake._handle(self, "POST")

            def do_PUT(self) -> None:
                fake._handle(self, "PUT")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _node(self, name: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "uid": f"uid-{name}", "labels": {}, "resourceVersion": "1"},
                "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeKube:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _handle(self, h: BaseHTTPRequestHandler, verb: str) -> None:
        url = urlparse(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        body = json.loads(h.rfile.read(length)) if length else None
        ctype = h.headers.get("Content-Type", "")
        with self.lock:
            self.requests.append((verb, url.path, copy.deepcopy(body), ctype))
            code, obj = self._route(verb, url.path, parse_qs(url.query), body, ctype)
        data = json.dumps(obj).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _invalid(self, body: Any, model: str) -> tuple[int, dict[str, Any]] | None:
        errors = schema_errors(body, model)
        if not errors:
            return None
        self.rejected += errors
        return 400, status(400, "strict decoding error: " + ", ".join(errors), "BadRequest")

    def _route(self, verb: str, path: str, query: dict[str, list[str]], body: Any,
               ctype: str) -> tuple[int, Any]:
        if verb in ("PATCH", "POST", "PUT"):
            model = {"eviction": "V1Eviction", "events": "CoreV1Event", "leases": "V1Lease"}.get(
                path.rstrip("/").split("/")[-1] if not path.startswith("/apis/coordination") else "leases", "V1Node")
            bad = self._invalid(body, model)
            if bad:
                return bad
        node = re.fullmatch(r"/api/v1/nodes/([^/]+)(/status)?", path)
        if node:
            return self._node_request(verb, node.group(1), body, ctype)
        pods = re.fullmatch(r"/api/v1(?:/namespaces/([^/]+))?/pods", path)
        if pods and verb == "GET":
            return 200, self._list_pods(pods.group(1), query)
        evict = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction", path)
        if evict and verb == "POST":
            return self._evict(*evict.groups(), body)
        posted = re.fullmatch(r"/api/v1/namespaces/([^/]+)/events", path)
        if posted and verb == "POST":
            meta = body.setdefault("metadata", {})
            meta.setdefault("namespace", posted.group(1))
            meta.setdefault("uid", f"event-{len(self.events)}")
            meta.setdefault("name", meta.pop("generateName", "event") + str(len(self.events)))
            self.events.append(body)
            return 201, body
        if path == "/api/v1/events" and verb == "GET":
            return self._list_events(query)
        lease = re.fullmatch(r"/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases(?:/([^/]+))?", path)
        if lease:
            return self._lease(verb, lease.group(1), lease.group(2), body)
        return 404, status(404, "the server could not find the requested resource", "NotFound")

    def _node_request(self, verb: str, name: str, body: Any, ctype: str) -> tuple[int, Any]:
        if name not in self.nodes:
            return 404, status(404, f'nodes "{name}" not found', "NotFound")
        obj = self.nodes[name]
        if verb == "GET":
            return 200, obj
        if verb != "PATCH":
            return 405, status(405, "method not allowed", "MethodNotAllowed")
        if "merge-patch+json" not in ctype:
            return 415, status(415, f"unsupported patch type {ctype}", "UnsupportedMediaType")
        want = (body.get("metadata") or {}).pop("resourceVersion", None)
        if want is not None and self.conflicts > 0:
            self.conflicts -= 1
            obj["metadata"]["resourceVersion"] = self._next_rv()  # someone else wrote in between
        if want is not None and want != obj["metadata"]["resourceVersion"]:
            return 409, status(409, f'Operation cannot be fulfilled on nodes "{name}": the object has been '
                               "modified; please apply your changes to the latest version and try again",
                               "Conflict")
        merge(obj, body)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        return 200, obj

    def _list_pods(self, namespace: str | None, query: dict[str, list[str]]) -> dict[str, Any]:
        field = query.get("fieldSelector", [""])[0]
        node = field.split("=", 1)[1] if field.startswith("spec.nodeName=") else None
        labels = dict(kv.split("=", 1) for kv in query.get("labelSelector", [""])[0].split(",") if "=" in kv)
        items = []
        for pod in list(self.pods):
            ref = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
            if pod["metadata"].get("deletionTimestamp"):
                if self.linger.get(ref, 0) <= 0:
                    self.pods.remove(pod)  # terminated
                    continue
                self.linger[ref] -= 1
            if namespace not in (None, pod["metadata"]["namespace"]):
                continue
            if node is not None and pod["spec"]["nodeName"] != node:
                continue
            if any(pod["metadata"].get("labels", {}).get(k) != v for k, v in labels.items()):
                continue
            items.append(pod)
        return {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": str(self._rv)}, "items": items}

    def _list_events(self, query: dict[str, list[str]]) -> tuple[int, Any]:
        wanted = dict(kv.split("=", 1) for kv in query.get("fieldSelector", [""])[0].split(",") if "=" in kv)
        paths = {"involvedObject.kind": ("involvedObject", "kind"), "involvedObject.name": ("involvedObject", "name")}
        unknown = set(wanted) - set(paths)
        if unknown:  # as the API server: a field selector it does not index is an error
            return 400, status(400, f'"{sorted(unknown)[0]}" is not a known field selector', "BadRequest")
        items = [e for e in self.events
                 if all((e.get(paths[k][0]) or {}).get(paths[k][1]) == v for k, v in wanted.items())]
        return 200, {"apiVersion": "v1", "kind": "EventList", "metadata": {"resourceVersion": str(self._rv)},
                     "items": copy.deepcopy(items)}

    def _evict(self, namespace: str, name: str, body: Any) -> tuple[int, Any]:
        match = [p for p in self.pods if p["metadata"]["name"] == name and p["metadata"]["namespace"] == namespace]
        if not match:
            return 404, status(404, f'pods "{name}" not found', "NotFound")
        ref = f"{namespace}/{name}"
        if self.pdb_blocks.get(ref, 0) > 0:
            self.pdb_blocks[ref] -= 1
            return 429, status(429, "Cannot evict pod as it would violate the pod's disruption budget.",
                               "TooManyRequests")
        match[0]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"  # terminating; gone after linger
        return 201, {"apiVersion": "v1", "kind": "Status", "status": "Success", "code": 201, "metadata": {}}

    def _lease(self, verb: str, namespace: str, name: str | None, body: Any) -> tuple[int, Any]:
        if verb == "POST":
            key = (namespace, body["metadata"]["name"])
            if key in self.leases:
                return 409, status(409, f'leases.coordination.k8s.io "{key[1]}" already exists', "AlreadyExists")
            body["metadata"].update(namespace=namespace, resourceVersion=self._next_rv())
            self.leases[key] = body
            return 201, body
        key = (namespace, name or "")
        if key not in self.leases:
            return 404, status(404, f'leases.coordination.k8s.io "{name}" not found', "NotFound")
        if verb == "GET":
            return 200, self.leases[key]
        if verb == "PUT":
            if body["metadata"].get("resourceVersion") != self.leases[key]["metadata"]["resourceVersion"]:
                return 409, status(409, "the object has been modified", "Conflict")
            body["metadata"]["resourceVersion"] = self._next_rv()
            self.leases[key] = body
            return 200, body
        return 405, status(405, "method not allowed", "MethodNotAllowed")


def pod(name: str, node: str, *, namespace: str = "training", daemonset: bool = False, mirror: bool = False,
        phase: str = "Running", labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Pod object as the API returns it."""
    owners = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "u1"}] if daemonset else []
    annotations = {"kubernetes.io/config.mirror": "abc"} if mirror else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "ownerReferences": owners,
                         "annotations": annotations, "labels": labels or {}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": phase}}
