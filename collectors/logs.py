"""Interesting log lines -> `LogEvent`s: CUDA, NCCL, XID, OOM and Python tracebacks.

`LogParser` is pure (feed it strings, get events) and keeps just enough
state to fold a multi-line Python traceback into one event whose `message`
is the exception line, which is the line a human and a rule both want, plus
its indented continuation lines (PyTorch's "size mismatch for ..." details);
such an event is complete at the next unindented line or at `flush()`.
torchrun's `[rank3]:` (`--log-line-prefix-template`) and `[default3]:`
(`--tee`) prefixes are stripped *before* anything else looks at a line, so
an indented continuation keeps its indent and the event gets its rank.

torchrun's own failure report, the `ChildFailedError` block, is folded
into one event naming the root-cause rank, its exit code and its exception
(the child's traceback when `@record` wrote an error file). The error file
itself (`TORCHELASTIC_ERROR_FILE`, JSON) is read by `error_file_event`.

`FileFollower` and `KernelLog` are the thin readers: a training log file
(followed across rotation) and the kernel ring buffer (`/dev/kmsg`), where
the driver's "NVRM: Xid" lines appear. Either may be unreadable on a given
node; that is reported once and tolerated.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from trainguard.schemas.records import LogEvent

log = logging.getLogger(__name__)

_RANK_PREFIX = re.compile(r"^\[(?:default|rank)(\d+)\]:")  # no \s: a continuation's indent must survive
_CHILD_FAILED = "ChildFailedError"
_SUMMARY_FIELD = re.compile(r"^\s*(rank|exitcode|error_file|traceback)\s*:\s?(.*)$")
MAX_SUMMARY_LINES = 80
_KMSG_PREFIX = re.compile(r"^\d+,\d+,\d+,[^;]*;")
# (category, level, pattern), first match wins: OOM before the generic CUDA error.
RULES: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("xid", "error", re.compile(r"NVRM: Xid \((?P<pci>[^)]*)\): (?P<code>\d+)")),
    ("oom", "error", re.compile(r"CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED")),
    ("nccl", "error", re.compile(r"NCCL (?:error|ERROR)|nccl(?:Internal|System|UnhandledCuda|Remote|InvalidUsage)Error"
                                 r"|Watchdog caught collective operation timeout|NCCL communicator was aborted")),
    ("nccl", "warning", re.compile(r"NCCL WARN")),
    ("cuda", "error", re.compile(r"CUDA error|cudaError\w*|CUDNN_STATUS_\w+|CUBLAS_STATUS_\w+"
                                 r"|device-side assert triggered|an illegal memory access")),
)
_TRACEBACK_START = "Traceback (most recent call last):"
MAX_MESSAGE_LINES = 20


@dataclass
class _Traceback:
    rank: int | None
    frames: int = 0


class LogParser:
    """Turns lines into `LogEvent`s; stateful only across a traceback's lines."""

    def __init__(self, *, node: str, source: str, job: str = "") -> None:
        self.node = node
        self.source = source
        self.job = job
        self._tb: _Traceback | None = None
        self._pending: LogEvent | None = None  # a finished traceback, collecting its message's continuation
        self._more: list[str] = []
        self._summary: list[str] | None = None  # torchrun's ChildFailedError block, being collected

    def feed(self, line: str, ts: float) -> list[LogEvent]:
        """Events completed by this line (usually none).

        >>> p = LogParser(node="n0", source="train")
        >>> p.feed("Traceback (most recent call last):", 1.0) + p.feed('  File "t.py", line 3, in <module>', 1.0)
        []
        >>> p.feed("ZeroDivisionError: division by zero", 1.0)
        []
        >>> p.flush()[0].message
        'ZeroDivisionError: division by zero'
        """
        line = _KMSG_PREFIX.sub("", line.rstrip("\r\n"))
        rank = None
        match = _RANK_PREFIX.match(line)
        while match:  # nested launchers prefix twice: "[rank1]: [rank2]: Traceback ..." (the outer one names us)
            rank, line = int(match.group(1)) if rank is None else rank, line[match.end():]
            if (len(line) - len(line.lstrip(" "))) % 2:
                line = line[1:]  # "[rank1]: " with a separator space (some versions); Python indents in pairs
            match = _RANK_PREFIX.match(line)
        if self._summary is not None:
            return self._summary_line(line, ts)
        if self._pending is not None:
            if _CHILD_FAILED in self._pending.message and rank is None:
                self._pending, self._more, self._summary = None, [], []
                return self._summary_line(line, ts)
            # Multi-line exception messages (PyTorch's "size mismatch for ..." lines) are indented.
            same_rank = rank is None or rank == self._pending.rank
            if same_rank and line.startswith((" ", "\t")) and line.strip() and len(self._more) < MAX_MESSAGE_LINES:
                self._more.append(line.strip())
                return []
            return self.flush() + self.feed(_prefixed(line, rank), ts)
        if self._tb is not None:
            if line.startswith((" ", "\t")) or not line.strip() or line.startswith(_TRACEBACK_START):
                self._tb.frames += line.lstrip().startswith("File ")
                return []
            if line.startswith("During handling of") or line.startswith("The above exception was"):
                return []  # a chained traceback continues
            tb, self._tb = self._tb, None
            who = tb.rank if tb.rank is not None else rank
            self._pending = self._event(ts, "error", "traceback", line.strip(), who)
            return []
        if line.startswith(_TRACEBACK_START):
            self._tb = _Traceback(rank=rank)
            return []
        for category, level, pattern in RULES:
            if pattern.search(line):
                return [self._event(ts, level, category, line.strip(), rank)]
        return []

    def _summary_line(self, line: str, ts: float) -> list[LogEvent]:
        """Collect torchrun's ChildFailedError block; it ends with a rule after its root cause."""
        assert self._summary is not None
        self._summary.append(line)
        ended = line.startswith("=====") and any(s.startswith("Root Cause") for s in self._summary)
        if not ended and len(self._summary) < MAX_SUMMARY_LINES:
            return []
        block, self._summary = self._summary, None
        return [self._child_failed(block, ts)]

    def _child_failed(self, block: list[str], ts: float) -> LogEvent:
        """One event for the root cause of a ChildFailedError report."""
        start = next((i for i, s in enumerate(block) if s.startswith("Root Cause")), 0)
        fields: dict[str, str] = {}
        tail: list[str] = []
        for text in block[start:]:
            found = _SUMMARY_FIELD.match(text)
            if found and found.group(1) not in fields:
                fields[found.group(1)] = found.group(2).strip()
            elif "traceback" in fields and text.strip() and not text.startswith("====="):
                tail.append(text)
        rank_m = re.match(r"-?\d+", fields.get("rank", ""))
        code_m = re.match(r"-?\d+", fields.get("exitcode", ""))
        exception = _exception_text(tail) or fields.get("traceback", "")
        message = f"ChildFailedError root cause: {exception}".strip()
        return self._event(ts, "error", "traceback", message, int(rank_m.group(0)) if rank_m else None,
                           exit_code=int(code_m.group(0)) if code_m else None)

    def flush(self) -> list[LogEvent]:
        """The traceback still collecting its message, if any (call when the process exits)."""
        if self._summary is not None:
            block, self._summary = self._summary, None
            return [self._child_failed(block, 0.0)] if block else []
        if self._pending is None:
            return []
        event, self._pending = self._pending, None
        if self._more:
            event = msgspec.structs.replace(event, message="\n".join([event.message, *self._more]))
            self._more = []
        return [event]

    def exit_event(self, code: int, ts: float, rank: int | None = None) -> LogEvent:
        """The event for a supervised process that exited with `code` (negative: killed by signal)."""
        level = "info" if code == 0 else "error"
        return self._event(ts, level, "exit", f"process exited with code {code}", rank, exit_code=code)

    def _event(self, ts: float, level: str, category: str, message: str, rank: int | None,
               exit_code: int | None = None) -> LogEvent:
        return LogEvent(ts=ts, node=self.node, level=level, source=self.source, message=message, job=self.job,
                        rank=rank, category=category, exit_code=exit_code)


def _prefixed(line: str, rank: int | None) -> str:
    return line if rank is None else f"[rank{rank}]:{line}"


def _exception_text(lines: list[str]) -> str:
    """The exception line and its indented continuation from a traceback's lines (dedented)."""
    body = [s[2:] if s.startswith("  ") else s for s in lines]
    for i, text in enumerate(body):
        if text and not text.startswith((" ", "\t")) and not text.startswith("Traceback"):
            rest = [t.strip() for t in body[i + 1:] if t.startswith((" ", "\t")) and t.strip()]
            return "\n".join([text.strip(), *rest[:MAX_MESSAGE_LINES]])
    return ""


def error_file_event(text: str, *, node: str, source: str, ts: float, job: str = "",
                     rank: int | None = None) -> LogEvent | None:
    """The event for a torchelastic error file (what `@record` writes to TORCHELASTIC_ERROR_FILE).

    The file holds the child's exception message and call stack as JSON;
    None when it is not such a file (a bad file is not an error event).
    """
    try:
        data = json.loads(text)
        inner = data["message"]
        message = inner["message"] if isinstance(inner, dict) else str(inner)
        code = inner.get("errorCode") if isinstance(inner, dict) else data.get("errorCode")
    except (ValueError, KeyError, TypeError):
        return None
    return LogEvent(ts=ts, node=node, level="error", source=source, message=str(message), job=job, rank=rank,
                    category="traceback", exit_code=code if isinstance(code, int) else None)


class FileFollower:
    """`tail -F` for one file: new complete lines since the last call, across rotation."""

    def __init__(self, path: Path, *, from_start: bool = False) -> None:
        self.path = path
        self._inode: int | None = None
        self._offset = 0
        self._partial = ""
        self._from_start = from_start

    def read_lines(self) -> list[str]:
        """Complete lines appended since the last call ([] if the file is absent)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return []
        if self._inode != st.st_ino or st.st_size < self._offset:
            start_at_end = self._inode is None and not self._from_start
            self._inode, self._offset, self._partial = st.st_ino, st.st_size if start_at_end else 0, ""
        with self.path.open("r", errors="replace") as f:
            f.seek(self._offset)
            chunk = f.read()
            self._offset = f.tell()
        text = self._partial + chunk
        lines = text.split("\n")
        self._partial = lines.pop()
        return lines


class KernelLog:
    """Non-blocking reader of `/dev/kmsg` (needs CAP_SYSLOG); absent or denied -> no lines."""

    def __init__(self, path: Path = Path("/dev/kmsg"), *, warn: Callable[[str], None] = log.warning) -> None:
        self.path = path
        self._fd: int | None = None
        self._failed = False
        self._warn = warn

    def read_lines(self) -> list[str]:
        """Kernel messages logged since the last call (starting from now, not the backlog).

        The backlog is skipped on purpose: events carry the time they are read,
        so replaying a boot's worth of old XIDs after every collector restart
        would report them as fresh faults.
        """
        if self._failed:
            return []
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
                os.lseek(self._fd, 0, os.SEEK_END)
            except OSError as exc:
                self._failed = True
                self._warn(f"kernel log {self.path} unreadable ({exc.strerror}); XIDs come from NVML only")
                return []
        lines: list[str] = []
        while True:
            try:
                record = os.read(self._fd, 8192)
            except BlockingIOError:
                return lines
            except BrokenPipeError:
                continue  # the ring buffer overwrote records we had not read; carry on
            except OSError:
                return lines
            if not record:
                return lines
            lines.append(record.decode(errors="replace").split("\n", 1)[0])

    def close(self) -> None:
        """Release the file descriptor."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
