"""RDMA (InfiniBand / RoCE) port counters from sysfs: one `RdmaSample` per interval.

Reading (`read_ports`, file I/O under a configurable root) is apart from the
arithmetic (`RateTracker`, pure), so the rate logic is tested on numbers and
the reader on a fixture tree under tests/fixtures/sysfs.

Facts about the counters this module encodes:

* `port_xmit_data` / `port_rcv_data` count 4-byte words, not bytes (x4).
* Files the driver does not have read as 0 ("no data" is a value).
* Legacy 32-bit counters wrap at 2**32, extended ones at 2**64; a counter
  that goes *down* from a low value was reset (driver reload, `perfquery -R`),
  and the new value is then the best estimate of the interval's delta.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trainguard.schemas.records import RdmaPort, RdmaSample

DEFAULT_ROOT = Path("/sys/class/infiniband")
WORD_BYTES = 4
_WIDTHS = (1 << 32, 1 << 64)

# record field -> candidate sysfs file names (counters/ or hw_counters/)
ERROR_FILES: dict[str, tuple[str, ...]] = {
    "link_downed": ("link_downed",),
    "symbol_errors": ("symbol_error",),
    "rcv_errors": ("port_rcv_errors",),
    "xmit_discards": ("port_xmit_discards",),
    "link_error_recovery": ("link_error_recovery",),
}


@dataclass(frozen=True)
class PortCounters:
    """Raw cumulative counters of one port, bytes already scaled from words."""

    device: str
    port: int
    state: str
    tx_bytes: int
    rx_bytes: int
    errors: dict[str, int] = field(default_factory=dict)


def parse_state(text: str) -> str:
    """`'4: ACTIVE'` -> `'ACTIVE'`.

    >>> parse_state("4: ACTIVE\\n")
    'ACTIVE'
    """
    text = text.strip()
    return text.split(":", 1)[1].strip() if ":" in text else (text or "UNKNOWN")


def counter_delta(prev: int, cur: int) -> int:
    """Increase of a cumulative counter, allowing for wrap and reset.

    >>> counter_delta(10, 15)
    5
    >>> counter_delta(2**32 - 6, 4)       # 32-bit wrap
    10
    >>> counter_delta(1000, 30)           # reset: count since the reset
    30
    """
    if cur >= prev:
        return cur - prev
    for width in _WIDTHS:
        if prev < width and prev >= width - width // 4:
            return width - prev + cur  # near the top of its width: a wrap
    return cur


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _counter(port_dir: Path, name: str) -> int:
    for sub in ("counters", "hw_counters"):
        value = _read_int(port_dir / sub / name)
        if value is not None:
            return value
    return 0


def read_ports(root: Path = DEFAULT_ROOT) -> list[PortCounters]:
    """Every port of every device under `root`; an absent root means no ports."""
    out: list[PortCounters] = []
    if not root.is_dir():
        return out
    for dev_dir in sorted(p for p in root.iterdir() if (p / "ports").is_dir()):
        for port_dir in sorted((dev_dir / "ports").iterdir(), key=lambda p: p.name):
            if not port_dir.name.isdigit():
                continue
            try:
                state = parse_state((port_dir / "state").read_text())
            except OSError:
                state = "UNKNOWN"
            out.append(PortCounters(
                device=dev_dir.name,
                port=int(port_dir.name),
                state=state,
                tx_bytes=_counter(port_dir, "port_xmit_data") * WORD_BYTES,
                rx_bytes=_counter(port_dir, "port_rcv_data") * WORD_BYTES,
                errors={k: max(_counter(port_dir, n) for n in names) for k, names in ERROR_FILES.items()},
            ))
    return out


class RateTracker:
    """Turns successive raw readings into `RdmaPort`s with byte rates (pure)."""

    def __init__(self) -> None:
        self._prev: dict[tuple[str, int], tuple[float, int, int]] = {}

    def update(self, now: float, ports: list[PortCounters]) -> list[RdmaPort]:
        """Rates are 0.0 on a port's first reading (no interval yet)."""
        out: list[RdmaPort] = []
        for p in ports:
            key = (p.device, p.port)
            tx_bps = rx_bps = 0.0
            prev = self._prev.get(key)
            if prev is not None and now > prev[0]:
                dt = now - prev[0]
                tx_bps = counter_delta(prev[1], p.tx_bytes) / dt
                rx_bps = counter_delta(prev[2], p.rx_bytes) / dt
            self._prev[key] = (now, p.tx_bytes, p.rx_bytes)
            out.append(RdmaPort(device=p.device, port=p.port, state=p.state, tx_bytes=p.tx_bytes,
                                rx_bytes=p.rx_bytes, tx_bps=tx_bps, rx_bps=rx_bps, **p.errors))
        return out


class RdmaCollector:
    """One `RdmaSample` per call, from the sysfs tree under `root`."""

    name = "rdma"

    def __init__(self, *, node: str, root: Path = DEFAULT_ROOT, job: str = "") -> None:
        self.node = node
        self.job = job
        self.root = root
        self._rates = RateTracker()

    def collect(self, now: float) -> list[RdmaSample]:
        """A sample with every port (an empty list on a node without RDMA)."""
        ports = self._rates.update(now, read_ports(self.root))
        return [RdmaSample(ts=now, node=self.node, job=self.job, ports=ports)]

    def close(self) -> None:
        """Nothing to release; present so every collector closes the same way."""
