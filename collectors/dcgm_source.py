"""dcgm-exporter as a GPU source: scrape its `/metrics`, publish `NodeGpuSample`s as the NVML collector does.

`trainguard collect --source dcgm-exporter --url http://localhost:9400/metrics`
runs this instead of `collectors.nvml.GpuCollector`: no NVML, no GPU device,
no privilege; the node and job stamping are the same. Parsing is
`collectors.dcgm_exporter` (pure); this module is the thin HTTP edge.

The scrape runs in a worker thread under `timeout_s`, so an exporter that
hangs mid-answer cannot stall the node loop. Whatever goes wrong (refused,
HTTP error, hung, not Prometheus text, no DCGM field at all because DCGM's
host engine is down) is a sample with `nvml_ok=False` and the reason: the
node is *unobserved*, never healthy, and the collector reports itself
failed. `source="dcgm-exporter"` tells the hardware detector that a timeout
here is the exporter's, not a GPU hanging its driver calls.

A GPU the exporter showed before and no longer shows is reported `lost`
(what NVML says of a GPU that fell off the bus), as is one whose every field
reads blank.
"""

from __future__ import annotations

import concurrent.futures
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from trainguard.collectors.dcgm_exporter import Scrape, XidTracker, parse_exposition
from trainguard.schemas.records import GpuStats, NodeGpuSample

SOURCE = "dcgm-exporter"
MAX_BYTES = 16 << 20  # a 8-GPU node with every field is ~200 KB; more is not an exporter


class ScrapeFailed(RuntimeError):
    """The exporter could not be read; the message says why."""


def http_get(url: str, timeout_s: float) -> str:
    """The body of a GET on `url` (urllib; its socket timeout bounds each read)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:  # noqa: S310 (http(s) checked by the CLI)
            body = answer.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise ScrapeFailed(f"dcgm-exporter at {url} answered HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ScrapeFailed(f"dcgm-exporter at {url} unreachable: {reason}") from None
    if len(body) > MAX_BYTES:
        raise ScrapeFailed(f"dcgm-exporter at {url} sent more than {MAX_BYTES} bytes")
    return body.decode("utf-8", errors="replace")


class DcgmExporterCollector:
    """Builds one `NodeGpuSample` per call from a dcgm-exporter scrape."""

    name = "dcgm_exporter"

    def __init__(self, *, node: str, url: str, job: str = "", timeout_s: float = 5.0,
                 fetch: Callable[[str, float], str] = http_get) -> None:
        self.node = node
        self.job = job
        self.url = url
        self.timeout_s = timeout_s
        self._fetch = fetch
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="dcgm-scrape")
        self._hung: concurrent.futures.Future[Any] | None = None
        self._xids = XidTracker()
        self._known: dict[int, str] = {}  # GPU index -> UUID, of every GPU the exporter has shown

    def collect(self, now: float) -> list[NodeGpuSample]:
        """One sample. Never raises: failure is a sample with `nvml_ok=False`."""
        if self._hung is not None and not self._hung.done():
            return [self._failed(now, f"dcgm-exporter at {self.url} still not answering "
                                      f"(over {self.timeout_s}s); not asking again yet")]
        self._hung = None
        future = self._pool.submit(self._scrape)
        try:
            scrape = future.result(timeout=self.timeout_s)
        except concurrent.futures.TimeoutError:
            self._hung = future
            return [self._failed(now, f"dcgm-exporter at {self.url} gave no answer within {self.timeout_s}s")]
        except ScrapeFailed as exc:
            return [self._failed(now, str(exc))]
        except Exception as exc:  # anything else the exporter sent still leaves the node unobserved
            return [self._failed(now, f"dcgm-exporter at {self.url}: {type(exc).__name__}: {exc}")]
        if not scrape.gpus:
            return [self._failed(now, f"dcgm-exporter at {self.url} served no DCGM GPU metrics "
                                      "(is DCGM's host engine running?)")]
        return [NodeGpuSample(ts=now, node=self.node, job=self.job, gpus=self._gpus(scrape),
                              xids=self._xids.events(scrape, now), source=SOURCE)]

    def close(self) -> None:
        """Stop the worker thread (a hung scrape is abandoned)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _scrape(self) -> Scrape:
        text = self._fetch(self.url, self.timeout_s)
        try:
            return parse_exposition(text)
        except ValueError as exc:
            raise ScrapeFailed(f"dcgm-exporter at {self.url} sent no Prometheus text: {exc}") from None

    def _gpus(self, scrape: Scrape) -> list[GpuStats]:
        for index, reading in scrape.gpus.items():
            self._known[index] = reading.uuid or self._known.get(index, "")
        out = {index: reading.stats() for index, reading in scrape.gpus.items()}
        for index, uuid in self._known.items():
            if index not in out:
                out[index] = GpuStats(index=index, uuid=uuid, lost=True)  # shown before, gone now
        return [out[i] for i in sorted(out)]

    def _failed(self, now: float, error: str) -> NodeGpuSample:
        return NodeGpuSample(ts=now, node=self.node, job=self.job, nvml_ok=False, error=error, source=SOURCE)
