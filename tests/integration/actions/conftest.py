"""Fixtures for the action tests. First: a fake Kubernetes API server.

It implements exactly the endpoints the Kubernetes executor uses, with the
real paths, verbs, content types and object shapes of the core/v1 API:
GET/PATCH /api/v1/nodes/{name}, GET /api/v1/pods (fieldSelector,
labelSelector), POST /api/v1/namespaces/{ns}/pods/{name}/eviction. Unknown
objects get a 404 `Status`, as the real server answers. Every request is
recorded so tests can assert what the client sent.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest


class FakeKube:
    """State (nodes, pods) plus a server thread."""

    def __init__(self, nodes: list[str], pods: list[dict[str, Any]]) -> None:
        self.nodes: dict[str, dict[str, Any]] = {
            n: {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": {}}, "spec": {}} for n in nodes}
        self.pods = pods
        self.requests: list[tuple[str, str, Any]] = []
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

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeKube:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handle(self, h: BaseHTTPRequestHandler, verb: str) -> None:
        url = urlparse(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        body = json.loads(h.rfile.read(length)) if length else None
        self.requests.append((verb, url.path, body, h.headers.get("Content-Type", "")))  # type: ignore[arg-type]
        node = re.fullmatch(r"/api/v1/nodes/([^/]+)", url.path)
        evict = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction", url.path)
        if node and node.group(1) not in self.nodes:
            return self._send(h, 404, _status(404, f'nodes "{node.group(1)}" not found', "NotFound"))
        if node and verb == "GET":
            return self._send(h, 200, self.nodes[node.group(1)])
        if node and verb == "PATCH" and "merge-patch" not in h.headers.get("Content-Type", ""):
            return self._send(h, 415, _status(415, "unsupported patch type", "UnsupportedMediaType"))
        if node and verb == "PATCH":
            spec = self.nodes[node.group(1)]["spec"]
            spec.update(body.get("spec", {}))
            return self._send(h, 200, self.nodes[node.group(1)])
        if url.path == "/api/v1/pods" and verb == "GET":
            query = parse_qs(url.query)
            field = query.get("fieldSelector", [""])[0]
            want = field.split("=", 1)[1] if field.startswith("spec.nodeName=") else None
            items = [p for p in self.pods if want is None or p["spec"]["nodeName"] == want]
            return self._send(h, 200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items})
        if evict and verb == "POST":
            ns, name = evict.groups()
            match = [p for p in self.pods if p["metadata"]["name"] == name and p["metadata"]["namespace"] == ns]
            if not match:
                return self._send(h, 404, _status(404, f'pods "{name}" not found', "NotFound"))
            self.pods.remove(match[0])
            return self._send(h, 201, body)
        return self._send(h, 404, _status(404, "the server could not find the requested resource", "NotFound"))

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, code: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)


def _status(code: int, message: str, reason: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Status", "status": "Failure", "message": message, "reason": reason,
            "code": code, "metadata": {}}


def pod(name: str, node: str, *, namespace: str = "training", daemonset: bool = False) -> dict[str, Any]:
    """A minimal Pod object as the API returns it."""
    owners = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "u1"}] if daemonset else []
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "ownerReferences": owners},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}}


@pytest.fixture
def fake_kube() -> Any:
    """`fake_kube(nodes, pods)` -> a running `FakeKube` (use as a context manager)."""
    return FakeKube


@pytest.fixture
def kube_pod() -> Any:
    """`kube_pod(name, node, daemonset=False)` -> a Pod object."""
    return pod
