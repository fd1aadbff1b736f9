"""A tiny deterministic fleet with injected faults, for checking detectors.

It ships with the package (not under tests/) because `detectors.checks` feeds
its `mixed_stream` to every detector, plug-ins included, in their own CI.

`Fleet` writes the records a small synchronous job would produce (steps on
every rank, heartbeats, GPU and RDMA samples), and each `inject_*` helper
changes what the next steps or samples look like. Everything is a plain
function of its arguments and a seeded RNG, so the tests are reproducible.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from trainguard.schemas.records import (
    GpuStats,
    Heartbeat,
    LogEvent,
    NodeGpuSample,
    PhaseChange,
    RdmaPort,
    RdmaSample,
    Record,
    StackSample,
    TrainingStep,
    XidEvent,
)


@dataclass
class Fleet:
    """A job of `nodes` x `gpus` ranks; dp replicas of (tp, pp) shards."""

    job: str = "job-a"
    nodes: int = 4
    gpus: int = 4
    tp: int = 2
    pp: int = 1
    step_s: float = 2.0
    noise: float = 0.02
    seed: int = 0
    ts: float = 1000.0
    step: int = 0
    attempt: int = 0
    slow: dict[int, float] = field(default_factory=dict)  # rank -> compute-time factor
    hot: dict[int, dict[str, object]] = field(default_factory=dict)  # node index -> GPU 0 overrides
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    @property
    def world(self) -> int:
        return self.nodes * self.gpus

    def node(self, rank: int) -> str:
        return f"node-{rank // self.gpus:02d}"

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(dp, tp, pp) of a rank: tp fastest, then pp, then dp."""
        return rank // (self.tp * self.pp), rank % self.tp, (rank // self.tp) % self.pp

    def steps(self, n: int, *, loss: float = 2.0, checksum_of: dict[int, str] | None = None,
              bad: dict[int, dict[str, object]] | None = None) -> list[Record]:
        """`n` synchronous steps on every rank, with heartbeats and samples every 5 steps."""
        out: list[Record] = []
        for _ in range(n):
            self.step += 1
            compute = [self.step_s * 0.8 * (1 + self.rng.gauss(0, self.noise)) * self.slow.get(r, 1.0)
                       for r in range(self.world)]
            step_time = max(compute) / 0.8
            self.ts += step_time
            for rank in range(self.world):
                dp, tp, pp = self.coords(rank)
                fields: dict[str, object] = {
                    "loss": loss * (1 + self.rng.gauss(0, 0.01)), "grad_norm": 1.0 + self.rng.gauss(0, 0.01),
                    "step_time_s": step_time, "compute_time_s": compute[rank], "tokens": 4096,
                    "checksum": (checksum_of or {}).get(rank, f"sum-{self.step}-{tp}-{pp}"),
                }
                fields.update((bad or {}).get(rank, {}))
                out.append(TrainingStep(ts=self.ts + rank * 1e-4, job=self.job, rank=rank, node=self.node(rank),
                                        step=self.step, dp=dp, tp=tp, pp=pp, attempt=self.attempt,
                                        **fields))  # type: ignore[arg-type]
            if self.step % 5 == 0:
                out += self.beats() + self.samples()
        return out

    def beats(self, phase: str = "training") -> list[Record]:
        return [Heartbeat(ts=self.ts + 0.01, job=self.job, rank=r, node=self.node(r), step=self.step,
                          phase=phase) for r in range(self.world)]  # type: ignore[arg-type]

    def samples(self, *, xids: dict[int, list[XidEvent]] | None = None, gpu: dict[str, object] | None = None,
                gpu_node: int = -1, port_state: dict[int, str] | None = None) -> list[Record]:
        """One GPU and one RDMA sample per node; `gpu` overrides GPU 0 of node `gpu_node`."""
        out: list[Record] = []
        for n in range(self.nodes):
            name = self.node(n * self.gpus)
            base: dict[str, object] = {"temp_c": 60.0, "sm_clock_mhz": 1900, "max_sm_clock_mhz": 1980,
                                       "util_pct": 95}
            extra = gpu if (n == gpu_node and gpu) else self.hot.get(n, {})
            gpus = [GpuStats(index=i, **{**base, **(extra if i == 0 else {})})  # type: ignore
                    for i in range(self.gpus)]
            out.append(NodeGpuSample(ts=self.ts + 0.02, node=name, gpus=gpus, xids=(xids or {}).get(n, []),
                                     job=self.job))
            state = (port_state or {}).get(n, "ACTIVE")
            out.append(RdmaSample(ts=self.ts + 0.03, node=name, job=self.job,
                                  ports=[RdmaPort(device="mlx5_0", port=1, state=state, tx_bps=5e9, rx_bps=5e9)]))
        return out

    def idle(self, seconds: float, *, every_s: float = 10.0, phase: str = "training") -> list[Record]:
        """Time passes with no step: heartbeats and samples only (a hang or a pause)."""
        out: list[Record] = []
        end = self.ts + seconds
        while self.ts + every_s <= end:
            self.ts += every_s
            out += self.beats(phase) + self.samples()
        self.ts = end
        return out

    def phase(self, phase: str) -> PhaseChange:
        return PhaseChange(ts=self.ts + 0.005, job=self.job, phase=phase, step=self.step)  # type: ignore[arg-type]

    def stacks(self, odd_rank: int) -> list[Record]:
        wait = ["train.py:100 main", "train.py:50 step", "dist.py:7 all_reduce", "nccl wait"]
        odd = ["train.py:100 main", "train.py:40 next_batch", "loader.py:77 read"]
        return [StackSample(ts=self.ts + 0.04, job=self.job, rank=r, node=self.node(r),
                            frames=odd if r == odd_rank else wait) for r in range(self.world)]

    def log(self, message: str, *, rank: int = 0, exit_code: int | None = None) -> LogEvent:
        return LogEvent(ts=self.ts + 0.05, node=self.node(rank), level="ERROR", source="python", message=message,
                        job=self.job, rank=rank, exit_code=exit_code)


def mixed_stream(seed: int = 0, steps: int = 120) -> list[Record]:
    """A stream touching every detector: healthy steps, then faults of every kind."""
    f = Fleet(seed=seed)
    out = f.steps(steps)
    out += f.samples(xids={1: [XidEvent(gpu=2, code=79, ts=f.ts)]})
    out += f.steps(5, checksum_of={5: "corrupt"})
    out += f.steps(3, bad={3: {"loss": "nan"}})
    out += f.steps(2, loss=40.0)
    out.append(f.log("ModuleNotFoundError: No module named 'flash_attn'"))
    out += f.samples(port_state={2: "DOWN"}) + f.steps(2) + f.samples(port_state={2: "DOWN"})
    out += f.stacks(odd_rank=6) + f.idle(120)
    f.slow = {9: 1.4}
    out += f.steps(60) + f.steps(1, bad={0: {"step_time_s": 90.0}})
    for i in range(1, 6):  # a hot node whose single-bit ECC count climbs fast
        f.ts += 40
        out += f.samples(gpu={"ecc_sbe": 500 * i, "temp_c": 95.0}, gpu_node=0)
    return out
