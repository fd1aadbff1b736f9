"""A local HTTP server that serves dcgm-exporter's output from fixtures (tests/fixtures/dcgm_exporter).

No GPU, and so no real dcgm-exporter, runs here: this server answers
`GET /metrics` with one of the fixture files, which hold exposition text as
the real exporter writes it (see that folder's README). Tests switch the
file to inject a fault, and can make the "exporter" fail the ways a real one
does: an HTTP error, a hang (it accepts and never answers), or text that is
not Prometheus exposition.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures" / "dcgm_exporter"


class DcgmExporterFixture:
    """`with DcgmExporterFixture("default_healthy.prom") as exporter: ... exporter.url ...`."""

    def __init__(self, fixture: str = "default_healthy.prom") -> None:
        self.fixture = fixture
        self.mode = "ok"  # ok | error | hang | garbage
        self.hang_s = 30.0
        self.scrapes = 0
        self._release = threading.Event()
        served = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                served._answer(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/metrics"

    def serve(self, fixture: str, mode: str = "ok") -> None:
        """From now on answer with `fixture` (and `mode`)."""
        self.fixture, self.mode = fixture, mode

    def __enter__(self) -> DcgmExporterFixture:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()

    def _answer(self, h: BaseHTTPRequestHandler) -> None:
        self.scrapes += 1
        if h.path != "/metrics":
            return self._send(h, 404, b"404 page not found\n")
        if self.mode == "hang":
            self._release.wait(self.hang_s)
            return None
        if self.mode == "error":
            return self._send(h, 500, b"An error has occurred while serving metrics:\n\ncollection failed\n")
        if self.mode == "garbage":
            return self._send(h, 200, b"<html><body>not metrics {{{</body></html>\n")
        return self._send(h, 200, (FIXTURES / self.fixture).read_bytes())

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, code: int, body: bytes) -> None:
        h.send_response(code)
        h.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
