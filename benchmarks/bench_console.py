"""The console with 1,000 nodes and 10,000 incidents in history: API latency and page render time.

Two consoles are served side by side from the same process: one whose state
holds a big fleet's history (1,000 nodes in 4 jobs, 10,000 incidents each
with its anomaly, decision, command, result and audit entries, 4 x 5,000
steps), and one empty. Figures:

* API: median and p95 wall time of each view's GET, sequential, over a
  keep-alive connection; baseline `/api/health` on the same server (auth,
  routing and JSON, no view work). Ratio = view / baseline.
* Page: in headless Chromium, each view's render time (fetch + DOM build +
  charts, as the page measures it) with the big state against the same view
  with the empty state. Ratio = loaded / empty.

The state is filled straight from records (no broker): this measures the
console, not Kafka. Run: `python -m benchmarks.bench_console`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time
import urllib.request
from collections.abc import Sequence

from aiohttp import web

from trainguard.schemas.kinds import ANOMALY_KINDS
from trainguard.schemas.records import (
    ActionCommand,
    ActionResult,
    Anomaly,
    AuditEntry,
    CheckpointEvent,
    Decision,
    Incident,
    JobTopology,
    NodeGpuSample,
    PlannedAction,
    TrainingStep,
)
from trainguard.schemas.topics import Topics
from trainguard.streams.console.app import create_app
from trainguard.streams.console.auth import Authenticator, User
from trainguard.streams.console.feed import ConsoleFeed
from trainguard.streams.console.settings import ConsoleSettings
from trainguard.streams.console.state import ConsoleState

TOKEN = "bench-operator"
KINDS = ANOMALY_KINDS


def big_state(nodes: int = 1000, incidents: int = 10_000, jobs: int = 4, steps: int = 5000) -> ConsoleState:
    """A fleet's worth of history, as the console would have read it from the topics."""
    s = ConsoleState(standby_nodes=[f"spare-{i}" for i in range(16)])
    per_job = nodes // jobs
    t0 = 1_764_000_000.0
    for j in range(jobs):
        names = {r: f"node-{j * per_job + r:04d}" for r in range(per_job)}
        s.observe(JobTopology(ts=t0, job=f"job-{j}", world_size=per_job, dp=per_job, rank_nodes=names))
        for step in range(steps):
            s.observe(TrainingStep(ts=t0 + step * 2.0, job=f"job-{j}", rank=0, node=names[0], step=step,
                                   loss=3.0 / (1 + step) ** 0.2, step_time_s=2.0, mfu=0.42))
            if step % 500 == 0:
                s.observe(CheckpointEvent(ts=t0 + step * 2.0, job=f"job-{j}", step=step, path=f"/ckpt/{j}/{step}"))
    for n in range(nodes):
        s.observe(NodeGpuSample(ts=t0 + steps * 2.0, node=f"node-{n:04d}", job=f"job-{n // per_job}"))
    for i in range(incidents):
        job, node, ts = f"job-{i % jobs}", f"node-{(i * 7) % nodes:04d}", t0 + i * 1.0
        kind = KINDS[i % len(KINDS)]
        s.observe(Anomaly(ts=ts, id=f"a{i}", kind=kind, detector=kind, onset=ts - 1, job=job, nodes=[node],  # type: ignore[arg-type]
                          evidence={"score": 3.2, "window": 30}))
        s.observe(Incident(ts=ts, id=f"i{i}", kind=kind, job=job, onset=ts - 1, detected_at=ts, nodes=[node],  # type: ignore[arg-type]
                           anomaly_ids=[f"a{i}"], evidence={"score": 3.2}))
        s.observe(Decision(ts=ts, id=f"d{i}", incident_id=f"i{i}", job=job, kind=kind, rule=f"{kind}.rule",  # type: ignore[arg-type]
                           reason="bench", plan=[PlannedAction(action="evict_node", nodes=[node])],
                           inputs={"nodes": [node]}, alternatives=["retry: no"],
                           status="awaiting_approval" if i % 1000 == 0 else "planned"))
        s.observe(ActionCommand(ts=ts, id=f"d{i}-0", action="stop", nodes=[node], decision_id=f"d{i}"))
        s.observe(ActionResult(ts=ts, command_id=f"d{i}-0", action="stop", status="ok", node=node))
        s.observe(AuditEntry(ts=ts, event="decision_executed", subject_id=f"d{i}", actor="trainguard-act"))
    s.observe(AuditEntry(ts=t0 + incidents, event="rails_state", subject_id="rails", actor="trainguard-act",
                         detail={"breaker": {"tripped": False, "reason": ""},
                                 "pool": {"spares": [f"spare-{i}" for i in range(12)], "swaps": {}},
                                 "evicted": {"job-0": [f"node-{n:04d}" for n in range(0, 40, 4)]}}))
    return s


def serve(states: dict[str, ConsoleState]) -> dict[str, str]:
    """Serve one console per state on free ports in a background thread; return their URLs."""
    urls: dict[str, str] = {}
    ready = threading.Event()

    async def main() -> None:
        auth = Authenticator([User(name="bench", role="operator", token=TOKEN)])
        for name, state in states.items():
            feed = ConsoleFeed("unused:0", Topics("bench."), state)
            feed.caught_up = True
            runner = web.AppRunner(create_app(feed, auth, ConsoleSettings(), manage_feed=False))
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            urls[name] = f"http://127.0.0.1:{runner.addresses[0][1]}"
        ready.set()
        await asyncio.Event().wait()

    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()
    ready.wait(30)
    return urls


def api_latency(url: str, path: str, n: int) -> tuple[float, float]:
    """Median and p95 seconds of `n` sequential GETs."""
    req = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {TOKEN}"})
    times = []
    for _ in range(n):
        start = time.perf_counter()
        with urllib.request.urlopen(req) as resp:
            resp.read()
        times.append(time.perf_counter() - start)
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def page_render(url: str, hashes: list[str], repeat: int) -> dict[str, float]:
    """Median in-page render ms of each view in headless Chromium."""
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000"):
        opts.add_argument(arg)
    opts.binary_location = "/usr/bin/chromium"
    browser = webdriver.Chrome(options=opts, service=webdriver.ChromeService("/usr/bin/chromedriver"))
    out: dict[str, float] = {}
    try:
        browser.get(url + "/")
        browser.add_cookie({"name": "tg_session", "value": TOKEN, "path": "/"})
        browser.refresh()
        wait = WebDriverWait(browser, 120, poll_frequency=0.05)
        wait.until(lambda b: b.find_element(By.ID, "view").get_attribute("data-rendered"))
        for hash_ in hashes:
            samples = []
            for _ in range(repeat):
                count = int(browser.find_element(By.ID, "view").get_attribute("data-rendered") or 0)
                browser.execute_script("location.hash = arguments[0]; "
                                       "window.dispatchEvent(new HashChangeEvent('hashchange'))",
                                       hash_)
                # wait.until calls the lambda before the loop moves on, so the late binding is harmless
                wait.until(lambda b: int(b.find_element(By.ID, "view").get_attribute("data-rendered") or 0) > count)  # noqa: B023
                samples.append(float(browser.find_element(By.ID, "view").get_attribute("data-render-ms") or 0))
            out[hash_] = statistics.median(samples)
    finally:
        browser.quit()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_console", description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--incidents", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=50, help="GETs per API path")
    parser.add_argument("--renders", type=int, default=5, help="renders per view")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    state = big_state(args.nodes, args.incidents)
    print(f"state: {args.nodes} nodes, {len(state.incidents)} incidents, built in {time.perf_counter() - start:.1f}s; "
          f"load {os.getloadavg()[0]:.2f} (1-min), {os.cpu_count()} cores")
    urls = serve({"big": state, "empty": ConsoleState()})
    base, _ = api_latency(urls["big"], "/api/health", args.requests)
    print(f"API baseline /api/health: median {base * 1000:.2f} ms")
    paths = ["/api/fleet", "/api/incidents?limit=200", "/api/incidents/i9999", "/api/controls", "/api/jobs",
             "/api/jobs/job-0"]
    for path in paths:
        med, p95 = api_latency(urls["big"], path, args.requests)
        print(f"API {path:28s} median {med * 1000:7.2f} ms  p95 {p95 * 1000:7.2f} ms  x{med / base:5.1f} baseline")
    hashes = ["#fleet", "#incidents", "#incidents/i9999", "#controls", "#jobs/job-0"]
    empty_hashes = ["#fleet", "#incidents", "#controls"]
    loaded = page_render(urls["big"], hashes, args.renders)
    empty = page_render(urls["empty"], empty_hashes, args.renders)
    for h in hashes:
        ref = empty.get(h)
        ratio = f"x{loaded[h] / ref:5.1f} empty ({ref:.1f} ms)" if ref else "(no empty baseline: needs data)"
        print(f"page {h:18s} render {loaded[h]:7.1f} ms  {ratio}")
    print(f"load after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
