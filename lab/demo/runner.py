"""The demo orchestrator: start the stack, inject faults one by one, report.

For each fault it shows what a user wants to see: the fault injected, the
incident trainguard raised and its detection latency, the decision, the
actions executed, and the checkpoint training resumed from. Everything it
reports is read back from the topics: the orchestrator only injects.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml
from kafka import KafkaProducer

from trainguard.lab.demo.faults import Fault, FaultBoard
from trainguard.lab.demo.scenario import DemoScenario, FaultStep
from trainguard.lab.demo.stack import DemoStack
from trainguard.lab.demo.watch import TopicWatcher
from trainguard.schemas.action_params import Restart
from trainguard.schemas.codec import Codec
from trainguard.schemas.kafka_config import client_options
from trainguard.schemas.records import (
    ActionCommand,
    ActionResult,
    CheckpointEvent,
    Decision,
    GpuStats,
    Incident,
    NodeGpuSample,
    TrainingStep,
    XidEvent,
)
from trainguard.schemas.signing import Signer, generate, load_signer, new_command_id
from trainguard.schemas.topics import Topics, key_for
from trainguard.settings import Settings


@dataclass
class FaultOutcome:
    """What happened to one injected fault."""

    step: FaultStep
    injected_at: float
    incident: Incident | None = None
    decision: Decision | None = None
    results: list[ActionResult] = field(default_factory=list)
    resumed_from: int | None = None
    recovered_at: float | None = None
    onset_step: int | None = None  # the last step trained before the fault was injected
    restored_tiers: dict[int, str] = field(default_factory=dict)  # rank -> tier it restored from

    @property
    def latency_s(self) -> float | None:
        return None if self.incident is None else self.incident.detected_at - self.injected_at

    @property
    def ok(self) -> bool:
        return (self.incident is not None and self.incident.kind == self.step.expect
                and self.recovered_at is not None)


@dataclass
class DemoOutcome:
    """The whole run: per-fault outcomes and the job's final state."""

    run_dir: Path
    faults: list[FaultOutcome]
    final_step: int | None
    final_loss: float | None
    target_step: int | None
    steps: list[TrainingStep]
    incidents: list[Incident]
    results: list[ActionResult]
    started_at: float
    ended_at: float


class DemoRunner:
    """Runs one `DemoScenario` against the broker in `settings`."""

    def __init__(self, scenario: DemoScenario, settings: Settings, run_dir: Path,
                 say: Reporter, *, console_port: int | None = None, hold_s: float = 0.0) -> None:
        self.sc = scenario
        self.console_port = console_port  # None: no operator console
        self.hold_s = hold_s  # keep the stack (and console) up this long after the faults
        self.settings = settings
        self.run_dir = run_dir
        self.say = say
        self.prefix = f"demo{uuid.uuid4().hex[:8]}."
        self.topics = Topics(self.prefix)
        self.board = FaultBoard(run_dir / "fault.json")
        self.final_file = run_dir / "final_step"
        self.codec = Codec()
        self.signer: Signer | None = None  # act's key, made per run (the operator's hot update uses it)
        self._producer: KafkaProducer | None = None
        self._xid_nodes: set[str] = set()
        self._stop = threading.Event()
        shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else run_dir
        self.ram_dir = shm / "trainguard-demo" / self.prefix.rstrip(".")  # the simulated nodes' RAM

    # ------------------------------------------------------------------ run

    def run(self) -> DemoOutcome:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        config = self.run_dir / "config.yaml"
        config.write_text(yaml.safe_dump({**self.sc.config(str(self.run_dir)), "security": self._make_keys()}))
        env = self._env()
        self._producer = KafkaProducer(bootstrap_servers=self.settings.broker.servers, acks="all", linger_ms=5,
                                       **client_options(self.settings.broker, "kafka-python"))
        watcher = TopicWatcher(self.settings.broker.servers, self.topics)
        started = time.time()
        with DemoStack(self.run_dir, env) as stack:
            cfg = ["--config", str(config)]
            stack.start("worker", *cfg, "worker")
            stack.start("act", *cfg, "act", "--executor", "local")
            if self.console_port is not None:
                from trainguard.lab.demo.console_ui import start_console

                access = start_console(stack, cfg, self.run_dir, self.console_port)
                self.say.phase(f"operator console: {access.url}")
                self.say.phase(f"  operator token: {access.operator_token}")
                self.say.phase(f"  viewer token:   {access.viewer_token}")
            for node in self.sc.nodes:
                stack.start(node, *cfg, "run", "--job", self.sc.job, "--node", node, "--", *self._train_cmd(),
                            extra_env={"NODE_NAME": node})
            for node in self.sc.standbys:
                stack.start(node, *cfg, "run", "--job", self.sc.job, "--node", node, "--", *self._standby_cmd(),
                            extra_env={"NODE_NAME": node})
            watcher.start()
            gpu_thread = threading.Thread(target=self._gpu_telemetry, args=(watcher,), daemon=True)
            gpu_thread.start()
            try:
                outcome = self._drive(watcher, stack, started)
                if self.hold_s > 0:
                    self.say.phase(f"faults done; the stack and console stay up {self.hold_s:g}s (Ctrl-C ends)")
                    time.sleep(self.hold_s)
            finally:
                self._stop.set()
                watcher.stop()
                self._producer.close()
                shutil.rmtree(self.ram_dir, ignore_errors=True)
        return outcome

    def _drive(self, watcher: TopicWatcher, stack: DemoStack, started: float) -> DemoOutcome:
        self.say.phase("starting the broker-backed stack: worker, action consumer, "
                       f"{len(self.sc.nodes)} node agents + {len(self.sc.standbys)} warm standbys")
        first = watcher.wait_for(TrainingStep, lambda s: True, 240, alive=lambda: stack.alive("worker"))
        if first is None:
            raise RuntimeError(f"training never started; see the logs in {self.run_dir}")
        self.say.phase(f"training started: job {self.sc.job}, {len(self.sc.nodes)} ranks over "
                       f"{len(self.sc.nodes)} simulated nodes (DDP over gloo)")
        outcomes: list[FaultOutcome] = []
        for step in self.sc.faults:
            self._wait_healthy(watcher)
            outcomes.append(self._inject_and_follow(step, watcher))
        target = self._finish(watcher)
        steps = watcher.records(TrainingStep)
        last = max(steps, key=lambda s: (s.ts, s.step), default=None)
        return DemoOutcome(self.run_dir, outcomes, last.step if last else None,
                           _loss(last), target, steps, watcher.records(Incident),
                           watcher.records(ActionResult), started, time.time())

    # ------------------------------------------------------------- faults

    def _inject_and_follow(self, step: FaultStep, watcher: TopicWatcher) -> FaultOutcome:
        node = step.node
        if node and node not in self._active(watcher):  # evicted earlier: the fault hits a node still in the job
            node = sorted(self._active(watcher))[0]
        step = FaultStep(step.kind, node, step.expect, step.title, step.slow_s)
        attempts = self._attempts(watcher)
        known = {i.id for i in watcher.records(Incident)}
        out = FaultOutcome(step, injected_at=time.time())
        out.onset_step = max((s.step for s in watcher.records(TrainingStep)), default=None)
        self.say.inject(step)
        self._inject(step, watcher)
        out.incident = watcher.wait_for(Incident, lambda i: i.id not in known and i.job == self.sc.job,
                                        self.sc.detect_timeout_s)
        self.board.disarm()
        self._xid_nodes.discard(step.node)
        if out.incident is None:
            self.say.missed(step)
            return out
        self.say.incident(out.incident, out.latency_s or 0.0)
        incident_id = out.incident.id
        out.decision = watcher.wait_for(Decision, lambda d: d.incident_id == incident_id, self.sc.recover_timeout_s)
        if out.decision is not None:
            self.say.decision(out.decision)
        resumed = watcher.wait_for(TrainingStep, lambda s: s.attempt > attempts.get(s.node, -1)
                                   and s.ts > out.injected_at, self.sc.recover_timeout_s)
        if out.decision is not None:
            out.results = [r for r in watcher.records(ActionResult) if r.command_id.startswith(out.decision.id)]
            self.say.actions(out.results)
        if resumed is not None:
            out.resumed_from = resumed.step - 1
            out.recovered_at = resumed.ts
            out.restored_tiers = {c.rank: c.tier for c in watcher.records(CheckpointEvent)
                                  if c.status == "restored" and c.ts > out.injected_at and c.job == self.sc.job}
            self.say.restored(out.restored_tiers, out.onset_step)
            self.say.resumed(resumed, out.recovered_at - out.injected_at)
        else:
            self.say.not_recovered(step)
        return out

    def _inject(self, step: FaultStep, watcher: TopicWatcher) -> None:
        fid = uuid.uuid4().hex[:8]
        if step.kind == "xid79":
            self._xid_nodes.add(step.node)
        elif step.kind == "bad_code":
            self._hot_update("v2-bad", watcher)
        else:
            self.board.arm(Fault(id=fid, kind=step.kind, node=step.node, slow_s=step.slow_s))

    def _hot_update(self, version: str, watcher: TopicWatcher) -> None:
        """What an operator pushing new code does: a signed hot update to the job's agents."""
        ckpts = [c for c in watcher.records(CheckpointEvent) if c.status == "saved" and c.job == self.sc.job]
        latest = max(ckpts, key=lambda c: c.step, default=None)
        now = time.time()
        cmd = ActionCommand(ts=now, expires=now + 60, id=new_command_id("operator"), action="hot_update",
                            job=self.sc.job, nodes=sorted(self._active(watcher)),
                            params=Restart(code_version=version, step=latest.step if latest else None,
                                           path=latest.path if latest else None,
                                           attempt=max(self._attempts(watcher).values(), default=0) + 1))
        assert self._producer is not None and self.signer is not None
        value = self.codec.encode(cmd)
        self._producer.send(self.topics.name("actions"), key=key_for(cmd), value=value,
                            headers=self.signer.headers(value))
        self._producer.flush()

    # ------------------------------------------------------------ helpers

    def _make_keys(self) -> dict[str, Any]:
        """Fresh keys for this run, as `trainguard keys generate` makes them: nothing has a default key."""
        keys = self.run_dir / "keys"
        for role in ("act", "console", "worker"):
            generate(keys, role)
        for node in (*self.sc.nodes, *self.sc.standbys):
            generate(keys / "nodes", node)
        self.signer = load_signer(keys / "act.key")
        return {"act_private_key": str(keys / "act.key"), "act_public_keys": [str(keys / "act.pub")],
                "node_private_key": str(keys / "nodes" / "{node}.key"), "node_public_keys": [str(keys / "nodes")],
                "console_private_key": str(keys / "console.key"), "console_public_keys": [str(keys / "console.pub")],
                "worker_private_key": str(keys / "worker.key"), "worker_public_keys": [str(keys / "worker.pub")]}

    def _wait_healthy(self, watcher: TopicWatcher) -> None:
        """Wait until the job has made steady progress and saved a checkpoint since the last fault."""
        newest = max(watcher.records(TrainingStep), key=lambda s: s.ts, default=None)
        since = newest.ts - 1.0 if newest else 0.0
        base = newest.step if newest else 0
        target = base + self.sc.healthy_steps_between
        watcher.wait_for(TrainingStep, lambda s: s.ts > since and s.step >= target, self.sc.recover_timeout_s)
        watcher.wait_for(CheckpointEvent, lambda c: c.step > base and c.status == "saved", self.sc.recover_timeout_s)

    def _finish(self, watcher: TopicWatcher) -> int | None:
        steps = watcher.records(TrainingStep)
        if not steps:
            return None
        target = max(s.step for s in steps) + self.sc.extra_steps_after_faults
        self.final_file.write_text(str(target))
        self.say.phase(f"all faults handled; training on to step {target}")
        watcher.wait_for(TrainingStep, lambda s: s.step >= target, self.sc.recover_timeout_s)
        time.sleep(2.0)  # the last records of every rank
        return target

    def _attempts(self, watcher: TopicWatcher) -> dict[str, int]:
        """Each node's latest attempt: a restart raises it on every node that takes part."""
        out: dict[str, int] = {}
        for s in watcher.records(TrainingStep):
            out[s.node] = max(out.get(s.node, -1), s.attempt)
        return out

    def _active(self, watcher: TopicWatcher) -> set[str]:
        """Nodes whose rank reported a step within a few seconds of the newest step."""
        last: dict[str, float] = {}
        for s in watcher.records(TrainingStep):
            last[s.node] = max(last.get(s.node, 0.0), s.ts)
        newest = max(last.values(), default=0.0)
        return {n for n, ts in last.items() if ts >= newest - 5.0} or set(self.sc.nodes)

    def _gpu_telemetry(self, watcher: TopicWatcher) -> None:
        """Simulated NVML samples (this machine has no GPU), one per node per second.

        Utilisation follows the node's training process, as on a real node: busy while
        its rank is alive (stepping, or blocked in a spinning collective), idle once it died.
        """
        assert self._producer is not None
        nodes = list(self.sc.nodes) + list(self.sc.standbys)
        while not self._stop.wait(1.0):
            now = time.time()
            for node in nodes:
                xid = node in self._xid_nodes
                util = 95.0 if now - watcher.last_activity.get(node, 0.0) < 5.0 else 0.0
                gpus = [GpuStats(index=i, uuid=f"GPU-{node}-{i}", util_pct=util, sm_clock_mhz=1980,
                                 max_sm_clock_mhz=1980, mem_used_mb=60000, power_w=620, temp_c=62,
                                 lost=xid and i == 3) for i in range(8)]
                sample = NodeGpuSample(ts=now, node=node, gpus=gpus, job=self.sc.job,
                                       xids=[XidEvent(gpu=3, code=79, ts=now, message="GPU has fallen off the bus")]
                                       if xid else [])
                try:
                    self._producer.send(self.topics.for_record(sample), key=key_for(sample),
                                        value=self.codec.encode(sample))
                except Exception:  # the demo is ending
                    return

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "TRAINGUARD_TOPICS__PREFIX": self.prefix,
            "TRAINGUARD_BROKER__BOOTSTRAP": self.settings.broker.servers,
            "TRAINGUARD_DEMO_FAULTS": str(self.board.path),
            "TRAINGUARD_DEMO_FINAL": str(self.final_file),
            "TRAINGUARD_CODE_VERSION": "v1",
            "TRAINGUARD_WORKER__STATE_DIR": str(self.run_dir / "worker"),
            "TRAINGUARD_WORKER__APP_ID": f"worker-{self.prefix}",
            "TRAINGUARD_ACTIONS__GROUP_ID": f"act-{self.prefix}",
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
        })
        return env

    def _train_cmd(self) -> list[str]:
        """One rank per simulated node; ranks come from a c10d rendezvous, as under torchrun."""
        return [sys.executable, "-m", "trainguard.lab.demo.train", "--job", self.sc.job,
                "--nnodes", str(len(self.sc.nodes)), "--rdzv-endpoint", f"127.0.0.1:{self.sc.master_port}",
                "--steps", str(self.sc.steps), "--ckpt-every", str(self.sc.ckpt_every),
                "--ckpt-dir", str(self.run_dir / "checkpoints"), "--compute-s", str(self.sc.compute_s),
                "--ram-dir", str(self.ram_dir)]

    def _standby_cmd(self) -> list[str]:
        """A warm standby idles until a restart command makes it join the job."""
        train = " ".join(json.dumps(a) for a in self._train_cmd())
        return ["sh", "-c", f'if [ "${{TRAINGUARD_ATTEMPT:-0}}" = 0 ]; then exec sleep 86400; fi; exec {train}']


def _loss(step: TrainingStep | None) -> float | None:
    if step is None:
        return None
    value = step.loss
    return float(value)


class Reporter(Protocol):
    """What the runner tells the user (see `lab.demo.console`)."""

    def phase(self, text: str) -> None: ...
    def inject(self, step: FaultStep) -> None: ...
    def missed(self, step: FaultStep) -> None: ...
    def incident(self, incident: Incident, latency_s: float) -> None: ...
    def decision(self, decision: Decision) -> None: ...
    def actions(self, results: list[ActionResult]) -> None: ...
    def resumed(self, step: TrainingStep, downtime_s: float) -> None: ...
    def not_recovered(self, step: FaultStep) -> None: ...
    def restored(self, tiers: dict[int, str], onset_step: int | None) -> None: ...
