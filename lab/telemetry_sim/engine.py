"""The telemetry simulator's core: a pure generator of records in event-time order.

One loop walks the job through its life (init, steps, checkpoint and eval
pauses, faults, crashes, restarts) in *segments* of constant mode. For each
segment it pushes the records that fall inside it (steps, heartbeats, GPU
and RDMA samples, stacks, logs) onto a heap, then releases every record
older than the segment's end. Records are therefore produced in event-time
order while only one segment's worth is held in memory, so a 1,000-GPU day
streams to disk without building a list.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterator

from trainguard.lab.telemetry_sim.hardware import NodeHardware
from trainguard.lab.telemetry_sim.plan import Fault, Layout
from trainguard.lab.telemetry_sim.scenario import Scenario
from trainguard.lab.telemetry_sim.steps import StepModel
from trainguard.lab.telemetry_sim.texts import (
    APP_CUDA_ERRORS,
    BENIGN_LOGS,
    CRASH_LOGS,
    CULPRIT_STACKS,
    HEALTHY_STACKS,
    SILENT_EXIT,
    TORCHRUN_SUMMARY,
    TRACEBACKS,
    WAITING_STACK,
)
from trainguard.schemas.records import (
    CheckpointEvent,
    Heartbeat,
    JobTopology,
    LogEvent,
    PhaseChange,
    Record,
    StackSample,
)

DAY_S = 86_400.0
HANG_STACK_DELAY_S = 30.0
HANG_STACK_EVERY_S = 60.0


class Simulation:
    """Generates a scenario's records; iterate `events()` once."""

    def __init__(self, scenario: Scenario, plan: list[Fault]) -> None:
        self.sc, self.plan, self.job = scenario, plan, scenario.job
        self.lay = Layout.of(scenario.job)
        self.begin = scenario.start_ts + self.job.start_s
        self.end = scenario.start_ts + (self.job.end_s or scenario.duration_s)
        self.rng = random.Random(scenario.seed)
        first = self.job.first_node or 0
        self.node_names = [f"{self.job.node_prefix}{first + i:03d}" for i in range(self.job.nodes)]
        bg = scenario.background
        self.hw = [NodeHardware(name=n, index=i, job=self.job.name, gpus=self.job.gpus_per_node,
                                ports=self.job.rdma_ports, seed=scenario.seed * 1000 + i,
                                benign_xids_per_h=bg.benign_xids_per_node_h,
                                rdma_errors_per_port_h=bg.rdma_errors_per_port_h)
                   for i, n in enumerate(self.node_names)]
        self.steps = StepModel(scenario, self.lay, self.node_names, plan, self.rng)
        self._heap: list[tuple[float, int, Record]] = []
        self._seq = 0
        start = self.begin
        rates = scenario.rates
        self._next = {"hb": start, "gpu": start, "rdma": start, "stack": start + rates.stack_sample_s}
        log_rate = bg.log_lines_per_node_h * self.job.nodes / 3600.0
        self._log_rate = log_rate
        self._next_log = start + (self.rng.expovariate(log_rate) if log_rate else math.inf)
        self.attempt, self.code_version = 0, self.job.code_version
        self.fleet = scenario.fleet
        self._stage_lag = [self.fleet.phase_spread_s * self.lay.coords(r)[1] / max(1, self.lay.pp - 1)
                           for r in range(self.lay.world)]
        every = DAY_S / bg.restarts_per_day if bg.restarts_per_day else math.inf
        self._restarts = [Fault(f"restart-{i}", "restart", "preempt", t, t + 1.0)
                          for i, t in enumerate(_arrivals(self.rng, self.begin + 600.0, self.end - 600.0, every))]

    # ------------------------------------------------------------------ driver

    def events(self) -> Iterator[Record]:
        """Every record of the scenario, in event-time order."""
        t = self._restart(self.begin, first=True)
        yield from self._flush(t)
        stops = sorted((f for f in [*self.plan, *self._restarts] if _stop_ts(f) is not None),
                       key=lambda f: _stop_ts(f) or 0.0)
        stops = [f for i, f in enumerate(stops) if f.kind != "restart" or not _near_fault(f, self.plan)]
        job = self.job
        next_ckpt, next_eval = self._grid(t, job.checkpoint_every_s), self._grid(t, job.eval_every_s)
        while t < self.end:
            stop = stops[0] if stops else None
            stop_ts = _stop_ts(stop) if stop else math.inf
            style = "sync"
            if t >= next_ckpt or t >= next_eval:
                phase = "checkpointing" if t >= next_ckpt else "eval"
                pause = job.checkpoint_pause_s if phase == "checkpointing" else job.eval_pause_s
                if phase == "checkpointing":
                    style = self.rng.choice(job.checkpoint_styles)
                    if style == "async":  # only the staging copy blocks the steps
                        pause = min(pause, self.rng.uniform(2.0, 5.0))
                    elif style == "megatron" and job.eval_pause_s:
                        pause += job.eval_pause_s
                    if style == "sync":
                        pause = self._storage(pause)
                t1 = t + pause
            else:
                phase, duration = "training", self.steps.duration(t)
                t1 = t + duration
            if stop is not None and stop_ts is not None and stop_ts < min(t1, self.end):
                stops.pop(0)
                if phase != "training":
                    self._enter_pause(t, phase)
                self._segment(t, stop_ts, phase, phase)
                t = self._handle_stop(stop, phase)
                next_ckpt, next_eval = self._grid(t, job.checkpoint_every_s), self._grid(t, job.eval_every_s)
            elif phase == "training":
                self._segment(t, t1, "training", "training")
                for rec in self.steps.records(t1, self.attempt, self.code_version):
                    self._push(rec)
                t = t1
            else:
                self._pause(t, t1, phase, style)
                if style == "megatron":  # that pause held the eval as well
                    next_eval = self._grid(t1, job.eval_every_s)
                if phase == "checkpointing":
                    next_ckpt = self._grid(t1, job.checkpoint_every_s)
                else:
                    next_eval = self._grid(t1, job.eval_every_s)
                t = t1
            yield from self._flush(min(t, self.end))
        if self.job.end_s is not None:  # the job completes: its processes exit cleanly, its nodes go idle
            self._announce(self.end - 0.5, "stopped")
            for node in range(self.job.nodes):
                self._log(self.end - 0.4, self.lay.ranks_on(node)[0], "INFO", "torchelastic",
                          "process exited with code 0", "exit", exit_code=0)
        yield from self._flush(self.end)

    def _grid(self, t: float, every: float) -> float:
        """The next pause time: pauses sit on a fixed grid from the start (as cron-like
        checkpoint policies do), so scenarios can place a fault inside one."""
        if not every:
            return math.inf
        start = self.sc.start_ts
        return start + math.floor((t - start) / every + 1.0) * every

    def _storage(self, pause: float) -> float:
        """A sync checkpoint's length on real storage: jittered, and now and then on a loaded shared filesystem."""
        job = self.job
        if job.checkpoint_jitter:
            pause *= self.rng.lognormvariate(0.0, job.checkpoint_jitter)
        if job.slow_checkpoint_p and self.rng.random() < job.slow_checkpoint_p:
            pause *= job.slow_checkpoint_factor
        return pause

    def _announce(self, ts: float, phase: str) -> None:
        """A phase change: once for the job, or by every rank as real training loops do.

        Ranks announce from their own loop, so pipeline stages reach a pause
        up to `phase_spread_s` apart, and a rank may announce before its
        peers' last step records (still in flight) are out.
        """
        job, step = self.job.name, self.steps.step
        if not self.fleet.per_rank_phases:
            self._push(PhaseChange(ts=ts, job=job, phase=phase, step=step))  # type: ignore[arg-type]
            return
        for r in range(self.lay.world):
            when = ts + self._stage_lag[r] + self.rng.uniform(-0.05, 0.1)
            self._push(PhaseChange(ts=when, job=job, phase=phase, step=step, rank=r,  # type: ignore[arg-type]
                                   node=self.node_names[self.lay.node_of(r)]))

    def _enter_pause(self, t0: float, phase: str, style: str = "sync") -> str:
        """Announce a checkpoint or eval pause; return the checkpoint path."""
        job = self.job.name
        self._announce(t0, phase)
        if style == "megatron":  # eval on a checkpoint step: three announcements within milliseconds
            self._announce(t0 + 0.001, "training")
            self._announce(t0 + 0.002, "eval")
        path = f"/ckpt/{job}/step_{self.steps.step:08d}"
        if phase == "checkpointing":
            self._push(CheckpointEvent(ts=t0 + 0.01, job=job, step=self.steps.step, path=path, status="started",
                                       code_version=self.code_version))
        return path

    def _pause(self, t0: float, t1: float, phase: str, style: str = "sync") -> None:
        job = self.job.name
        path = self._enter_pause(t0, phase, style)
        self._segment(t0, t1, phase, phase)
        if phase == "checkpointing" and t1 < self.end:
            # An async save finishes in the background while the next steps run.
            saved = t0 + self.job.checkpoint_pause_s if style == "async" else t1 - 0.01
            if saved < self.end:
                self._push(CheckpointEvent(ts=saved, job=job, step=self.steps.step, path=path, status="saved",
                                           code_version=self.code_version))
                self.steps.checkpointed()
        self._announce(t1, "training")

    # ------------------------------------------------------------------ faults

    def _handle_stop(self, f: Fault, phase: str) -> float:
        """Play a job-stopping fault out; return when training resumes."""
        if f.kind == "restart":  # a preemption or planned update: no fault, a new attempt
            self._log(f.start, 0, "INFO", "torchelastic", "process exited with code -15", "exit", exit_code=-15)
            return self._crash_and_restart(f.start + 0.5, f.start + self.rng.uniform(20.0, 90.0))
        if f.kind == "hang":
            # A dataloader hang leaves the GPUs idle; a collective or sync hang spins them at 100 %.
            self._segment(f.start, f.end, "hung_idle" if f.variant == "dataloader" else "hung", phase, hang=f)
            self._log(f.end, 0, "ERROR", "torch", CRASH_LOGS["hang"], "nccl", exit_code=None)
            return self._crash_and_restart(f.end, f.end)
        if f.kind in ("hw_fault", "network"):
            crash = min(f.start + self.rng.uniform(2.0, 8.0), f.end)
            self._segment(f.start, crash, "hung", phase)
            rank = f.rank if f.rank >= 0 else self.lay.ranks_on(f.node)[0]
            self._log(crash, rank, "ERROR", "nccl", CRASH_LOGS[f.kind], "nccl", exit_code=1)
            return self._crash_and_restart(crash, f.end)
        if f.kind == "user_error" and f.variant == "app_xid":
            return self._app_crash(f)
        if f.kind == "user_error" and f.variant == "sigkill":
            return self._killed(f)
        if f.kind == "user_error":
            return self._user_error(f)
        return self._crash_and_restart(f.end, f.end)  # nan / sdc: stopped once noticed

    def _app_crash(self, f: Fault) -> float:
        """A user kernel faults on every rank at once (illegal address, device-side assert): application
        XIDs on every node (the hardware model adds them) and a watchdog abort that reads as NCCL."""
        fail = f.start + self.rng.uniform(0.5, 3.0)
        self._segment(f.start, fail, "hung", "training")
        text = APP_CUDA_ERRORS[self.rng.randrange(len(APP_CUDA_ERRORS))]
        for node in range(self.job.nodes):
            rank = self.lay.ranks_on(node)[0]
            self._log(fail + 0.01 * node, rank, "ERROR", "python", text.format(rank=rank), "traceback", exit_code=-6)
        return self._crash_and_restart(fail + 0.5, f.end)

    def _killed(self, f: Fault) -> float:
        """SIGKILL (the kernel's OOM killer, a host-memory cgroup limit) takes the training processes of one node
        (`f.node`) or of every node: no traceback, no error file, only each agent's exit event. The other nodes'
        ranks block in their next collective; nothing else says why the job stopped."""
        die = f.start + self.rng.uniform(0.5, 3.0)
        self._segment(f.start, die, "hung", "training")
        code = self.rng.choice((-9, 137))  # the agent's signal death, or 128 + 9 through a shell wrapper
        for node in [f.node] if f.node >= 0 else range(self.job.nodes):
            rank = self.lay.ranks_on(node)[0]
            self._log(die + 0.01 * node, rank, "ERROR", "torchelastic", f"process exited with code {code}", "exit",
                      exit_code=code)
        return self._crash_and_restart(die + 0.5, f.end)

    def _user_error(self, f: Fault) -> float:
        """A redeploy with broken code: restart on a new code_version, fail with a traceback, roll back.

        Import, syntax and shape errors fail before the first step; an OOM
        after a config change typically survives a few steps first, so those
        steps carry the new code_version.
        """
        self._announce(f.start, "stopped")
        self._segment(f.start, f.start + 5.0, "down", "stopped")
        old = self.code_version
        self.code_version = f"{old}+{f.variant}"
        t = self._restart(f.start + 5.0)
        mode = "init"
        if f.variant == "oom":
            mode = "training"
            for _ in range(self.rng.randint(2, 5)):
                t1 = t + self.steps.duration(t)
                if t1 >= f.end - 10.0:
                    break
                self._segment(t, t1, "training", "training")
                for rec in self.steps.records(t1, self.attempt, self.code_version):
                    self._push(rec)
                t = t1
        fail = min(t + self.rng.uniform(0.5, 8.0), f.end - 1.0)
        self._segment(t, fail, mode, mode)
        for node in range(self.job.nodes):
            rank = self.lay.ranks_on(node)[0]
            if f.variant == "silent_startup":  # exit(1) in user code or a bad argument: nothing printed but torchrun's
                summary = TORCHRUN_SUMMARY.format(code=1, pid=_pid(self.attempt, rank))
                self._log(fail + 0.01 * node, rank, "ERROR", "stderr", summary, "", exit_code=None)
                self._log(fail + 0.02 * node + 0.005, rank, "ERROR", "torchelastic", SILENT_EXIT.format(code=1), "exit",
                          exit_code=1)
                continue
            self._log(fail + 0.01 * node, rank, "ERROR", "python", TRACEBACKS[f.variant], "traceback", exit_code=1)
        self.code_version = old
        return self._crash_and_restart(fail + 0.5, f.end)

    def _crash_and_restart(self, crash: float, back: float) -> float:
        self._announce(crash, "stopped")
        self._segment(crash, back, "down", "stopped")
        return self._restart(back)

    def _restart(self, ts: float, first: bool = False) -> float:
        """Bring the job (back) up at `ts`: topology, init, resume from checkpoint."""
        if not first:
            self.attempt += 1
            self.steps.resume_from_checkpoint()
        job = self.job
        rank_nodes = {r: self.node_names[self.lay.node_of(r)] for r in range(self.lay.world)}
        self._announce(ts, "init")
        self._push(JobTopology(ts=ts + 0.001, job=job.name, world_size=self.lay.world, tp=job.tp, pp=job.pp,
                               dp=self.lay.dp, rank_nodes=rank_nodes))
        up = min(ts + job.restart_delay_s, self.end)
        self._segment(ts, up, "init", "init")
        self._announce(up, "training")
        return up

    # ------------------------------------------------------------- telemetry

    def _segment(self, t0: float, t1: float, mode: str, phase: str, hang: Fault | None = None) -> None:
        """Push the periodic telemetry falling in [t0, t1) for a job in `mode`."""
        t1 = min(t1, self.end)
        rates, nodes, world = self.sc.rates, self.job.nodes, self.lay.world
        while self._next["hb"] < t1:
            tick = self._next["hb"]
            if mode not in ("down", "stopped", "hung_idle"):
                for r in range(world):
                    self._push(Heartbeat(ts=tick + rates.heartbeat_s * r / world, job=self.job.name, rank=r,
                                         node=self.node_names[self.lay.node_of(r)], pid=_pid(self.attempt, r),
                                         step=self.steps.step, phase=phase))  # type: ignore[arg-type]
            elif mode == "hung_idle":  # the processes live (heartbeat thread) but make no progress
                for r in range(world):
                    self._push(Heartbeat(ts=tick + rates.heartbeat_s * r / world, job=self.job.name, rank=r,
                                         node=self.node_names[self.lay.node_of(r)], pid=_pid(self.attempt, r),
                                         step=self.steps.step, phase=phase))  # type: ignore[arg-type]
            self._next["hb"] = tick + rates.heartbeat_s
        for kind, every in (("gpu", rates.gpu_sample_s), ("rdma", rates.rdma_sample_s)):
            while self._next[kind] < t1:
                tick = self._next[kind]
                for i, hw in enumerate(self.hw):
                    ts = tick + every * i / nodes
                    sample = hw.gpu_sample if kind == "gpu" else hw.rdma_sample
                    self._push(sample(ts, every, mode, self.plan))
                self._next[kind] = tick + every
        if rates.stack_sample_s:
            while self._next["stack"] < t1:
                if mode == "training":
                    self._stacks(self._next["stack"], HEALTHY_STACKS[self.rng.randrange(3)], None, "periodic")
                self._next["stack"] += rates.stack_sample_s
        if hang is not None:
            ts = hang.start + HANG_STACK_DELAY_S
            while ts < t1:
                self._stacks(ts, WAITING_STACK, hang, "periodic" if rates.stack_sample_s else "stall")
                ts += HANG_STACK_EVERY_S
        while self._next_log < t1:
            level, source, text = BENIGN_LOGS[self.rng.randrange(len(BENIGN_LOGS))]
            node = self.rng.randrange(nodes)
            self._push(LogEvent(ts=self._next_log, node=self.node_names[node], level=level, source=source,
                                message=text, job=self.job.name, category="info"))
            self._next_log += self.rng.expovariate(self._log_rate)

    def _stacks(self, ts: float, frames: list[str], hang: Fault | None, reason: str) -> None:
        for r in range(self.lay.world):
            own = CULPRIT_STACKS[hang.variant] if hang is not None and r == hang.rank else frames
            self._push(StackSample(ts=ts + 0.002 * r, job=self.job.name, rank=r,
                                   node=self.node_names[self.lay.node_of(r)], frames=list(own),
                                   pid=_pid(self.attempt, r), reason=reason))

    def _log(self, ts: float, rank: int, level: str, source: str, text: str, category: str,
             exit_code: int | None) -> None:
        node = self.node_names[self.lay.node_of(rank)]
        if self.fleet.torchrun_prefix and source != "torchelastic":
            # A plain log shipper forwards torchrun's lines as they are: every line carries [rankN]:.
            text = "\n".join(f"[rank{rank}]:{line}" for line in text.split("\n"))
            category = ""
        self._push(LogEvent(ts=ts, node=node, level=level, source=source, message=text, job=self.job.name,
                            rank=rank, category=category, exit_code=exit_code))

    def _push(self, record: Record) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (record.ts, self._seq, record))

    def _flush(self, until: float) -> Iterator[Record]:
        heap = self._heap
        while heap and heap[0][0] < until:
            yield heapq.heappop(heap)[2]


def _arrivals(rng: random.Random, t0: float, t1: float, mean_gap: float) -> list[float]:
    """Poisson arrival times in [t0, t1)."""
    out: list[float] = []
    t = t0 + rng.expovariate(1.0 / mean_gap) if math.isfinite(mean_gap) else math.inf
    while t < t1:
        out.append(t)
        t += rng.expovariate(1.0 / mean_gap)
    return out


def _near_fault(r: Fault, plan: list[Fault]) -> bool:
    """A background restart is dropped near a fault, so the ground truth stays unambiguous."""
    return any(f.start - 600.0 < r.start < f.end + 600.0 for f in plan)


def _stop_ts(f: Fault | None) -> float | None:
    """When a fault interrupts the job's normal loop, if it does at all."""
    if f is not None and f.kind == "restart":
        return f.start
    if f is None or not f.restarts:
        return None
    return f.end if f.kind in ("nan", "sdc") else f.start


def _pid(attempt: int, rank: int) -> int:
    return 20_000 + 1_000 * attempt + rank
