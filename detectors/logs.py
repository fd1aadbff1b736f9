"""user_error: the job failed because of its own code, not the machines.

Telling the two apart decides the recovery: a user error is fixed by
rolling the code back (evicting a healthy machine would not help), an
infrastructure error by evicting. `classify()` reads one log line:

* *infra* wins first: NCCL/c10d timeouts and errors, ECC/Xid/NVRM lines,
  a GPU lost or off the bus, RDMA/IB verbs errors, connection resets,
  unspecified launch failures, I/O errors. A `RuntimeError` carrying an
  NCCL message is infra even though Python raised it.
* *user*: exceptions raised by user code (ImportError, SyntaxError,
  NameError, AttributeError, TypeError, KeyError ...), tensor shape or
  device mismatches, device-side asserts, CUDA out-of-memory, and exit
  code 2 (a command-line usage error).
* anything else is *unknown* and never reported.

A job whose processes all die at start-up with the same exit code and no
message (no traceback, no error file: the agent's exit event says
"before its first step, saying nothing") is a user error too, when at
least `silent_startup_nodes` distinct nodes do so within
`silent_startup_window_s` and none of them logged an infrastructure line
meanwhile. A machine fault kills the ranks of one machine (the others then
fail with NCCL or rendezvous errors, which are infra lines); the same
silent exit on every machine at once is what the job's own code or
configuration does everywhere (a bad argument, a missing file, an exit(1)
in user code). One node alone stays unknown: it could be its machine.

A job whose ranks all die of an application CUDA error (application XIDs
13/31/43 on every node of the job at once, none fatal nearby) is a user
error as well, from the GPU samples alone: see `detectors.app_xid` (its
log lines read as NCCL failures, so the log rule alone would miss it).

A job whose ranks stop with no recognised cause is an incident all the
same (issue 22: every job that stops training must yield one). A non-zero
exit (or a signal death) on any node of a job opens a *pending crash*; if
no user error of this detector explains the job within `crash_grace_s` of
event time, it is reported as a user_error with `evidence.cause =
"unknown"` and `pending_diagnosis` (the engine retries it from the last
checkpoint instead of rolling code back; see docs/detectors.md). A crash
that another detector explains (hw_fault, network, nan, sdc) is absorbed by
the correlator into that incident: the grace lets those findings land first.
Not a crash: an exit 0 (training finished), an exit the agent marks as
commanded (act's stop or restart, `COMMANDED` in its message, and any exit
of the job within `crash_grace_s` after one), and SIGTERM (-15 / 143), the
orderly stop a scheduler or supervisor asks for.

An OOM's evidence says whether the job's `code_version` changed (as its
checkpoint announcements report it; step records are not read, to keep the
per-step cost down) — an OOM right after a code change is the classic case.
"""

from __future__ import annotations

import re
from typing import Any

from trainguard.detectors.app_xid import JobWideXids
from trainguard.detectors.base import Detector
from trainguard.detectors.common import MAX_RANKS, Bounded, finding
from trainguard.detectors.dispatch import on
from trainguard.schemas.records import Anomaly, CheckpointEvent, JobTopology, LogEvent, NodeGpuSample

INFRA = re.compile(
    r"NCCL|ProcessGroupNCCL|c10d|Watchdog caught collective|collective operation timeout|uncorrectable ECC|"
    r"ECC error|\bXid\b|NVRM|fallen off the bus|GPU is lost|NVLink|ibv_|\bRDMA\b|mlx5|"
    r"Connection reset by peer|Connection refused|Broken pipe|unspecified launch failure|"
    r"Input/output error|No space left on device|Bus error|TCPStore|hardware error",
    re.IGNORECASE,
)
USER = re.compile(
    r"\b(ModuleNotFoundError|ImportError|SyntaxError|IndentationError|NameError|UnboundLocalError|"
    r"AttributeError|TypeError|ValueError|KeyError|IndexError|AssertionError|ZeroDivisionError|"
    r"NotImplementedError|FileNotFoundError|RecursionError|OutOfMemoryError)\b|"
    r"CUDA out of memory|size mismatch|shape mismatch|shapes cannot be multiplied|must match the size|"
    r"Expected all tensors to be on the same device|device-side assert|mat1 and mat2"
)
OOM = re.compile(r"out of memory|OutOfMemoryError", re.IGNORECASE)
QUIET_LEVELS = frozenset({"debug", "info", "notice", "warn", "warning"})
SILENT_STARTUP = "before its first step, saying nothing"  # collectors.agent.error_file words the exit event so
COMMANDED = "stopped by command"  # collectors.agent.node_agent words a commanded stop's exit event so
ASKED_TO_STOP = frozenset({-15, 143})  # SIGTERM: a scheduler, supervisor or operator asked the job to stop


def classify(event: LogEvent) -> tuple[str, str]:
    """('infra' | 'user' | 'unknown', the matched text).

    >>> from trainguard.schemas.records import LogEvent
    >>> def c(m, code=None):
    ...     return classify(LogEvent(ts=0, node="n", level="error", source="x", message=m, exit_code=code))
    >>> c("ModuleNotFoundError: No module named 'flash_attn'")
    ('user', 'ModuleNotFoundError')
    >>> c("RuntimeError: NCCL communicator was aborted")[0], c("hello")[0], c("exited", 2)[0]
    ('infra', 'unknown', 'user')
    """
    text = event.message
    infra = INFRA.search(text)
    if infra:
        return "infra", infra.group(0)
    user = USER.search(text)
    if user:
        return "user", user.group(0)
    if event.exit_code == 2:
        return "user", "exit code 2"
    return "unknown", ""


class UserErrorDetector(Detector):
    """Flags log lines that show the job's own code failing (once per job per cooldown).

    >>> from trainguard.schemas.records import LogEvent
    >>> d = UserErrorDetector()
    >>> line = "Traceback (most recent call last): ... ImportError: cannot import name 'foo'"
    >>> [(a.kind, a.evidence["match"]) for a in d.observe(LogEvent(ts=3.0, node="n1", level="error",
    ...     source="stderr", message=line, job="j", rank=4))]
    [('user_error', 'ImportError')]
    """

    state_is_a_tree = True  # checked by detectors.checks (check_state_is_a_tree)

    def __init__(self, *, instance: str = "user_error", cooldown_s: float = 120.0, silent_startup_nodes: int = 2,
                 silent_startup_window_s: float = 120.0, app_xid_window_s: float = 20.0,
                 crash_grace_s: float = 30.0, max_jobs: int = 10_000) -> None:
        super().__init__(instance=instance)
        self.cooldown_s = cooldown_s
        self.silent_startup_nodes = silent_startup_nodes
        self.silent_startup_window_s = silent_startup_window_s
        self._silent: Bounded[str, dict[str, tuple[float, int]]] = Bounded(max_jobs)  # job -> node -> (ts, code)
        self._infra: Bounded[str, float] = Bounded(max_jobs)  # job -> newest infra line
        self._fired: Bounded[str, float] = Bounded(max_jobs)
        self._code: Bounded[str, tuple[str, float, bool]] = Bounded(max_jobs)  # job -> (version, since, changed)
        self.app_xid_window_s = app_xid_window_s
        self._xids = JobWideXids(window_s=app_xid_window_s, max_jobs=max_jobs)
        self.crash_grace_s = crash_grace_s
        self._crashes: Bounded[str, dict[str, Any]] = Bounded(max_jobs)  # job -> pending crash
        self._commanded: Bounded[str, float] = Bounded(max_jobs)  # job -> newest commanded exit

    @on(JobTopology)
    def _topology(self, record: JobTopology) -> None:
        self._xids.topology(record)

    @on(NodeGpuSample)
    def _gpu_sample(self, record: NodeGpuSample) -> list[Anomaly]:
        """Application XIDs on every node of a job at once: the job's kernels faulted, not its machines."""
        crash = self._xids.sample(record)
        if crash is None:
            return []
        job = record.job or self._xids.job_of(record.node)
        key = job
        last = self._fired.get(key)
        if last is not None and record.ts - last < self.cooldown_s:
            return []
        self._fired[key] = record.ts
        evidence: dict[str, Any] = {"match": crash["match"], "xid_codes": crash["codes"],
                                    "spread_s": crash["spread_s"], "source": "gpu_sample", "exit_code": None}
        code = self._code.get(job)
        if code is not None:
            evidence["code_version"] = code[0]
        return [finding(self.instance, "user_error", ts=record.ts, onset=min(crash["onset"], record.ts), job=job,
                        nodes=crash["nodes"], ranks=[], key=key, evidence=evidence)]

    @on(CheckpointEvent)
    def _checkpoint(self, record: CheckpointEvent) -> None:
        """The code version each checkpoint was written by: what an OOM is blamed on."""
        if record.code_version:
            seen = self._code.get(record.job)
            if seen is None or seen[0] != record.code_version:
                self._code[record.job] = (record.code_version, record.ts, seen is not None)

    @on(LogEvent)
    def _log(self, record: LogEvent) -> list[Anomaly]:
        if record.level.lower() in QUIET_LEVELS and record.exit_code is None and record.category != "traceback":
            return []  # a warning that mentions an exception name is not a failure
        if record.exit_code and record.job:
            self._exit(record)
        verdict, match = classify(record)
        if verdict == "infra" and record.job:
            self._infra[record.job] = max(record.ts, self._infra.get(record.job, record.ts))
        if verdict == "unknown" and record.exit_code and SILENT_STARTUP in record.message and record.job:
            return self._silent_startup(record)
        if verdict != "user":
            return []
        return self._report(record, match)

    def _silent_startup(self, record: LogEvent) -> list[Anomaly]:
        """Every node of the job died at start-up with this code and said nothing: the job's own doing."""
        window = self.silent_startup_window_s
        nodes = {n: v for n, v in self._silent.get(record.job, {}).items() if record.ts - v[0] <= window}
        nodes[record.node] = (record.ts, int(record.exit_code or 0))
        self._silent[record.job] = nodes
        same = sorted(n for n, (_, code) in nodes.items() if code == record.exit_code)
        infra_at = self._infra.get(record.job)
        if len(same) < self.silent_startup_nodes or (infra_at is not None and record.ts - infra_at <= window):
            return []
        return self._report(record, f"exit code {record.exit_code} at start-up on {len(same)} nodes, no message",
                            nodes=same)

    def _exit(self, record: LogEvent) -> None:
        """A rank stopped with a non-zero code: a pending crash, unless act or a scheduler stopped it."""
        job, code = record.job, int(record.exit_code or 0)
        if COMMANDED in record.message or code in ASKED_TO_STOP:
            self._commanded[job] = max(record.ts, self._commanded.get(job, record.ts))
            self._crashes.pop(job, None)  # act is handling the job: what stopped before is its business
            return
        commanded = self._commanded.get(job)
        if commanded is not None and 0 <= record.ts - commanded <= self.crash_grace_s:
            return  # the other ranks of a job act just stopped, dying of it
        crash = self._crashes.get(job)
        if crash is None:
            crash = self._crashes[job] = {"onset": record.ts, "exits": {}}
        if len(crash["exits"]) < MAX_RANKS:  # a job has fewer nodes than ranks: a flood of names stops here
            crash["exits"].setdefault(record.node, code)

    def tick(self, ts: float) -> list[Anomaly]:
        """Pending crashes whose grace ran out with no explanation: incidents of unknown cause."""
        if not self._crashes:
            return []
        due = [job for job, crash in self._crashes.items() if ts - crash["onset"] >= self.crash_grace_s]
        return [a for job in due for a in self._unexplained(job, self._crashes.pop(job), ts)]

    def _unexplained(self, job: str, crash: dict[str, Any], ts: float) -> list[Anomaly]:
        onset: float = crash["onset"]
        last = self._fired.get(job)
        if last is not None and last >= onset - self.crash_grace_s:
            return []  # already explained (a traceback, a silent start-up, application XIDs): one incident
        self._fired[job] = ts
        exits: dict[str, int] = crash["exits"]
        codes = sorted(set(exits.values()))
        evidence: dict[str, Any] = {
            "cause": "unknown", "pending_diagnosis": True, "source": "exit", "exit_code": codes[0],
            "exit_codes": dict(sorted(exits.items())), "grace_s": self.crash_grace_s,
            "match": f"exit code {'/'.join(map(str, codes))} on {len(exits)} node(s), no known cause",
        }
        code = self._code.get(job)
        if code is not None:
            evidence["code_version"] = code[0]
        return [finding(self.instance, "user_error", ts=max(ts, onset), onset=onset, job=job, nodes=sorted(exits),
                        ranks=[], key=job, evidence=evidence)]

    def _report(self, record: LogEvent, match: str, nodes: list[str] | None = None) -> list[Anomaly]:
        key = record.job or f"node:{record.node}"
        last = self._fired.get(key)
        if last is not None and record.ts - last < self.cooldown_s:
            return []
        self._fired[key] = record.ts
        evidence: dict[str, Any] = {"match": match, "message": record.message[-500:], "source": record.source,
                                    "exit_code": record.exit_code}
        code = self._code.get(record.job)
        if record.code_version:  # the supervisor knows which version printed the error: the best witness
            evidence["code_version"] = record.code_version
        elif code is not None:
            evidence["code_version"] = code[0]
        if OOM.search(record.message):
            evidence["oom"] = True
            evidence["code_changed_at"] = code[1] if code is not None and code[2] else None
        ranks = [record.rank] if record.rank is not None else []
        return [finding(self.instance, "user_error", ts=record.ts, onset=record.ts, job=record.job,
                        nodes=nodes or [record.node], ranks=ranks, key=key, evidence=evidence)]

    def state_size(self) -> int:
        silent = sum(len(n) for n in self._silent.values())
        pending = len(self._crashes) + len(self._commanded)
        return len(self._fired) + len(self._code) + silent + len(self._infra) + self._xids.state_size() + pending
