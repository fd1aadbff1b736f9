"""The training hook: a few lines in any PyTorch loop make the job observable.

    monitor = trainguard.TrainingMonitor(job="llm-7b", model=model)
    for batch in loader:
        loss = train_step(batch)
        monitor.step(loss=loss.item(), tokens=batch_tokens, grad_norm=norm)
        if step % 1000 == 0:
            with monitor.phase("checkpointing"):
                save(...)
            monitor.checkpoint_saved(step, path)

Publishing never blocks the loop: records go onto the publisher's in-memory
queue and a background thread ships them. A second background thread sends
a `Heartbeat` every `heartbeat_interval_s`; it keeps beating while the main
thread is stuck in a collective, so a hang shows as beats whose `step` no
longer moves. SIGUSR1 makes the process dump every thread's stack through
`faulthandler` (into `$TRAINGUARD_STACK_DIR/<pid>.txt` when the agent set
it), which is how `trainguard run` samples stacks without py-spy.

Under `trainguard run` the process is handed its attempt's key as a file
(TRAINGUARD_ATTEMPT_KEY_FILE, id in TRAINGUARD_ATTEMPT_KEY_ID) and the hook
signs what it publishes with it: act uses a job's checkpoint and topology
records only when its current attempt signed them. Without the file records
go unsigned (act refuses those unless `security.job_records_trusted_by_acl`).
"""

from __future__ import annotations

import atexit
import faulthandler
import hashlib
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from trainguard.collectors.sink import ClosingSink
from trainguard.schemas.records import CheckpointEvent, Heartbeat, JobTopology, Phase, PhaseChange, Record, TrainingStep
from trainguard.schemas.signing import KeyFileError, Signer, load_signer
from trainguard.schemas.topics import Topics
from trainguard.topology import Placement, coordinates, placement

# Dense bf16 peak FLOP/s by GPU model name fragment (vendor data sheets).
PEAK_FLOPS: dict[str, float] = {"B200": 2.25e15, "H200": 989e12, "H100": 989e12, "H800": 989e12,
                                "A100": 312e12, "A800": 312e12, "L40S": 362e12, "V100": 125e12}


log = logging.getLogger(__name__)

def param_checksum(params: Iterator[Any] | list[Any]) -> str:
    """A digest of the exact bits of every tensor, identical on every data-parallel replica.

    Replicas hold bit-identical parameters after each optimizer step, so any
    difference between their digests is silent data corruption. Each tensor
    is reinterpreted as integers of its element size and summed in int64
    where it lives (on the GPU for GPU tensors: nothing but the sums crosses
    to the host). Integer sums are exact and independent of reduction order,
    so every replica gets the same value whatever kernel ran, and a flipped
    bit always changes the sum. The per-tensor sums are then hashed. Its
    cost is measured in benchmarks/bench_hook.py, hence `checksum_every`.

    >>> import torch
    >>> param_checksum([torch.zeros(3)]) == param_checksum([torch.zeros(3)])
    True
    """
    import numpy as np
    import torch

    int_of = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    host: list[int] = []
    device: list[Any] = []
    for p in params:
        ints = p.detach().reshape(-1).view(int_of[p.element_size()])
        if ints.is_cuda:
            device.append(torch.sum(ints, dtype=torch.int64).reshape(1))
        else:
            host.append(int(ints.numpy().sum(dtype=np.int64)))
    sums = np.array(host, dtype=np.int64)
    if device:
        sums = np.concatenate([sums, torch.cat(device).cpu().numpy()])  # one device-to-host copy in all
    return hashlib.blake2b(sums.tobytes(), digest_size=16).hexdigest()


def detect_peak_flops() -> float | None:
    """The visible GPU's peak from `PEAK_FLOPS`; None on CPU or an unknown model."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        name = torch.cuda.get_device_name()
    except Exception:
        return None
    return next((v for k, v in PEAK_FLOPS.items() if k in name), None)


class TrainingMonitor:
    """Publishes a job's steps, phases, checkpoints, topology and heartbeats."""

    def __init__(self, *, job: str, model: Any = None, publisher: ClosingSink | None = None, tp: int = 1, pp: int = 1,
                 flops_per_token: float | None = None, peak_flops: float | None = None,
                 checksum_every: int = 100, heartbeat_interval_s: float = 5.0,
                 env: Mapping[str, str] | None = None, install_stack_signal: bool = True,
                 clock: Callable[[], float] = time.time) -> None:
        self.env = os.environ if env is None else env
        self.job = job
        self.model = model
        self.checksum_every = checksum_every
        self.heartbeat_interval_s = heartbeat_interval_s
        self.code_version = self.env.get("TRAINGUARD_CODE_VERSION", "")
        self.attempt = int(self.env.get("TRAINGUARD_ATTEMPT", "0") or 0)
        self.where: Placement = placement(self.env, _torch_dist())
        self.dp_index, self.tp_index, self.pp_index = coordinates(
            self.where.rank, world_size=self.where.world_size, tp=tp, pp=pp)
        n_params = sum(p.numel() for p in model.parameters()) if model is not None else 0
        self.flops_per_token = flops_per_token if flops_per_token is not None else 6.0 * n_params
        self.peak_flops = peak_flops if peak_flops is not None else detect_peak_flops()
        self.current_step = int(self.env.get("TRAINGUARD_RESUME_STEP", "0") or 0)
        self.current_phase: Phase = "training"
        self._clock = clock
        self._last_t = time.perf_counter()
        self._owns_publisher = publisher is None
        self._sink: ClosingSink = publisher or self._default_publisher()
        self._stop = threading.Event()
        self._stack_file: IO[str] | None = None
        if install_stack_signal:
            self._install_stack_signal()
        self._announce_topology(tp, pp)
        self._beater = threading.Thread(target=self._beat, name="trainguard-heartbeat", daemon=True)
        self._beater.start()
        self._closed = False
        atexit.register(self.close)  # a loop that forgets close() still delivers its last records

    # ---------------------------------------------------------------- API

    def step(self, *, loss: float, tokens: int = 0, grad_norm: float | None = None,
             compute_time_s: float | None = None, step: int | None = None) -> TrainingStep:
        """Record one finished optimizer step; returns the record it published."""
        now_perf = time.perf_counter()
        step_time_s = now_perf - self._last_t
        self._last_t = now_perf
        self.current_step = step if step is not None else self.current_step + 1
        checksum = None
        if self.model is not None and self.checksum_every > 0 and self.current_step % self.checksum_every == 0:
            checksum = param_checksum(self.model.parameters())
        record = TrainingStep(
            ts=self._clock(), job=self.job, rank=self.where.rank, node=self.where.node, step=self.current_step,
            loss=float(loss), grad_norm=None if grad_norm is None else float(grad_norm), tokens=tokens,
            step_time_s=step_time_s, compute_time_s=compute_time_s, mfu=self._mfu(tokens, step_time_s),
            dp=self.dp_index, tp=self.tp_index, pp=self.pp_index, checksum=checksum,
            code_version=self.code_version, attempt=self.attempt,
        )
        self._sink.publish(record)
        return record

    @contextmanager
    def phase(self, name: Phase) -> Iterator[None]:
        """Announce a phase (checkpointing, eval...) for the duration of the block.

        Detectors then know a long silence is a checkpoint, not a hang. The
        time spent inside does not count as step time.
        """
        self._set_phase(name)
        try:
            yield
        finally:
            self._set_phase("training")
            self._last_t = time.perf_counter()

    def publish(self, record: Record) -> None:
        """Send any record through the monitor's publisher (the checkpoint manager announces its tiers here)."""
        self._sink.publish(record)

    def checkpoint_saved(self, step: int, path: str | Path, *, status: str = "saved") -> None:
        """Announce a checkpoint so recovery knows where it can restart from."""
        self._sink.publish(CheckpointEvent(ts=self._clock(), job=self.job, step=step, path=str(path),
                                           status=status, rank=self.where.rank,  # type: ignore[arg-type]
                                           code_version=self.code_version))

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the heartbeat, announce `stopped`, and deliver what is queued."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        self._stop.set()
        self._beater.join(timeout=self.heartbeat_interval_s + 1)
        self._set_phase("stopped")
        if self._owns_publisher:
            self._sink.close(timeout_s)
        if self._stack_file is not None:
            faulthandler.unregister(signal.SIGUSR1)
            self._stack_file.close()
            self._stack_file = None

    def __enter__(self) -> TrainingMonitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------- internals

    def _mfu(self, tokens: int, step_time_s: float) -> float | None:
        if not (self.peak_flops and self.flops_per_token and tokens and step_time_s > 0):
            return None
        return self.flops_per_token * tokens / step_time_s / self.peak_flops

    def _set_phase(self, name: Phase) -> None:
        self.current_phase = name
        self._sink.publish(PhaseChange(ts=self._clock(), job=self.job, phase=name, rank=self.where.rank,
                                       node=self.where.node, step=self.current_step))

    def _beat(self) -> None:
        progress_dir = self.env.get("TRAINGUARD_PROGRESS_DIR")
        while True:
            self._sink.publish(Heartbeat(ts=self._clock(), job=self.job, rank=self.where.rank,
                                         node=self.where.node, pid=os.getpid(), step=self.current_step,
                                         phase=self.current_phase))
            if progress_dir:
                _write_progress(Path(progress_dir), self.current_step, self.current_phase, self.where.rank)
            if self._stop.wait(self.heartbeat_interval_s):
                return

    def _announce_topology(self, tp: int, pp: int) -> None:
        nodes = _gather_nodes(self.where)
        if self.where.rank == 0:
            ws = self.where.world_size
            self._sink.publish(JobTopology(ts=self._clock(), job=self.job, world_size=ws, tp=tp, pp=pp,
                                           dp=ws // (tp * pp), rank_nodes=nodes))

    def _install_stack_signal(self) -> None:
        stack_dir = self.env.get("TRAINGUARD_STACK_DIR")
        if stack_dir:
            Path(stack_dir).mkdir(parents=True, exist_ok=True)
            self._stack_file = open(Path(stack_dir) / f"{os.getpid()}.txt", "a")  # noqa: SIM115 (kept open)
            faulthandler.register(signal.SIGUSR1, file=self._stack_file, all_threads=True)
        else:
            faulthandler.register(signal.SIGUSR1, all_threads=True)

    def _default_publisher(self) -> ClosingSink:
        from trainguard.collectors.publisher import Publisher
        from trainguard.schemas.kafka_config import broker_from_environment, client_options

        base = Path(self.env.get("TRAINGUARD_COLLECTORS__SPOOL_DIR", ".trainguard/spool"))
        try:  # TLS/SASL from the TRAINGUARD_BROKER__* variables the agent's environment passes on
            kafka = client_options(broker_from_environment(), "kafka-python")
        except ValueError as exc:  # never stop training over telemetry: records spool until fixed
            log.error("trainguard hook: broker security settings unusable (%s); spooling to disk", exc)
            kafka = {}
        return Publisher(servers=self.env.get("TRAINGUARD_BROKER__BOOTSTRAP") or "127.0.0.1:9092",
                         signer=attempt_signer(self.env),
                         topics=Topics(self.env.get("TRAINGUARD_TOPICS__PREFIX", "tg.")),
                         spool_dir=base / f"hook-{self.job}-{self.where.rank}",
                         linger_s=1.0,  # one produce round trip per second keeps the CPU cost < 1%
                         client_id=f"trainguard-hook-{self.job}-{self.where.rank}", client_options=kafka,
                         sync=self.env.get("TRAINGUARD_COLLECTORS__SPOOL_SYNC", "process"))


def attempt_signer(env: Mapping[str, str]) -> Signer | None:
    """The attempt key `trainguard run` handed this process (a file path, never the key in the environment).

    None without one; an unreadable file is logged and records go unsigned: telemetry must never
    stop training, and act refuses what it cannot verify (audited), so nothing is trusted by mistake.
    """
    path, kid = env.get("TRAINGUARD_ATTEMPT_KEY_FILE"), env.get("TRAINGUARD_ATTEMPT_KEY_ID", "")
    if not path:
        return None
    try:
        return load_signer(Path(path), key_id=kid)
    except KeyFileError as exc:
        log.error("trainguard hook: attempt key unusable (%s); checkpoint and topology records go unsigned", exc)
        return None


def monitor(job: str, **kwargs: Any) -> TrainingMonitor:
    """Shorthand for `TrainingMonitor(job=job, **kwargs)`."""
    return TrainingMonitor(job=job, **kwargs)


def _write_progress(directory: Path, step: int, phase: str, rank: int) -> None:
    """Tell a local `trainguard run` agent our progress and rank (its hang watch and stack sampler read this).

    The rank matters because it is not always in the environment: a process that
    joins a rendezvous itself learns its rank only from torch.distributed.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"step": step, "phase": phase, "rank": rank}))
        os.replace(tmp, directory / f"{os.getpid()}.json")
    except OSError:
        pass  # liveness reporting must never break training


def _torch_dist() -> Any:
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    return dist


def _gather_nodes(where: Placement) -> dict[int, str]:
    """rank -> node for every rank (a collective when torch.distributed is up)."""
    dist = _torch_dist()
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return {where.rank: where.node}
    names: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(names, where.node)
    return {r: str(n) for r, n in enumerate(names)}
