"""dcgm-exporter's Prometheus text as `GpuStats`: the pure half of the dcgm-exporter source.

A fleet that already runs NVIDIA's dcgm-exporter need not open the GPUs a
second time: `parse_exposition` reads what the exporter serves (with
`prometheus_client`'s text parser) into the same per-GPU readings the NVML
collector builds, and `XidTracker` turns the exporter's XID metrics into
`XidEvent`s. The HTTP side is `collectors.dcgm_source`.

What maps where (`FIELDS`; units already match the record's: MHz, MiB, W, C):
the default counters of `etc/default-counters.csv` give utilisation, SM
clock, framebuffer used, power, temperature, PCIe replays, correctable and
uncorrectable remapped rows, the remap failure flag and the last XID. ECC
counts, NVLink error counters, the clock event (throttle) reasons, the
maximum SM clock, remap-pending and the recovery action are in DCGM but not
in the default set: each is read when the exporter's CSV enables it, and is
left at its healthy default (0/False) otherwise (docs/collectors.md says
which detector rule goes blind without which field).

DCGM prints a field it cannot read as a *blank*, a sentinel near the top of
the type's range (DCGM_INT32_BLANK 0x7ffffff0.., DCGM_INT64_BLANK
0x7ffffffffffffff0.., DCGM_FP64_BLANK 2**47): those are dropped, never read
as a reading. A GPU whose every mapped field is blank cannot be read at all
and is reported `lost`, as NVML reports a GPU that fell off the bus.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from trainguard.schemas.records import GpuStats, XidEvent

# dcgm-exporter metric -> GpuStats field. NVLink counters are summed into one field, as NVML's are.
FIELDS: dict[str, str] = {
    "DCGM_FI_DEV_GPU_UTIL": "util_pct",
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz",
    "DCGM_FI_DEV_MAX_SM_CLOCK": "max_sm_clock_mhz",
    "DCGM_FI_DEV_FB_USED": "mem_used_mb",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_GPU_TEMP": "temp_c",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "throttle_reasons",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "throttle_reasons",  # its name before DCGM 3.2
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "ecc_sbe",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc_dbe",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "remapped_correctable",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "remapped_uncorrectable",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "remap_failed",
    "DCGM_FI_DEV_ROW_REMAP_PENDING": "remap_pending",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "pcie_replays",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": "nvlink_errors",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": "nvlink_errors",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": "nvlink_errors",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": "nvlink_errors",
    "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION": "recovery_action",
}
SUMMED = frozenset({"nvlink_errors"})
FLAGS = frozenset({"remap_failed", "remap_pending"})
FLOATS = frozenset({"util_pct", "sm_clock_mhz", "max_sm_clock_mhz", "mem_used_mb", "power_w", "temp_c"})
XID_LAST = "DCGM_FI_DEV_XID_ERRORS"  # a gauge: the last XID the GPU reported (0: none since the driver loaded)
XID_TOTAL = "DCGM_EXP_XID_ERRORS_TOTAL"  # a counter per (GPU, xid) since the exporter started (exporter >= 4.x)
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"  # a gauge per (GPU, xid): how many in the exporter's sliding window


def is_blank(value: float) -> bool:
    """Whether `value` is one of DCGM's blank sentinels (the field could not be read).

    >>> is_blank(9223372036854775794), is_blank(2147483632), is_blank(1980.0), is_blank(float("nan"))
    (True, True, False, True)
    """
    return value != value or value >= 2.0**47 or 0x7FFFFFF0 <= value <= 0x7FFFFFFF


@dataclass
class GpuReading:
    """One GPU's mapped values from one scrape (blanks dropped), and its last XID."""

    index: int
    uuid: str = ""
    values: dict[str, float] = field(default_factory=dict)
    blanks: int = 0
    xid_last: int | None = None

    def stats(self) -> GpuStats:
        """The record's view: readable fields set, the rest at their healthy default; all-blank -> lost."""
        if not self.values and self.blanks:
            return GpuStats(index=self.index, uuid=self.uuid, lost=True)
        kw: dict[str, float | int | bool] = {}
        for name, value in self.values.items():
            kw[name] = bool(value) if name in FLAGS else (float(value) if name in FLOATS else int(value))
        return GpuStats(index=self.index, uuid=self.uuid, **kw)  # type: ignore[arg-type]


@dataclass
class Scrape:
    """Everything one exposition says about the GPUs."""

    gpus: dict[int, GpuReading] = field(default_factory=dict)
    xid_totals: dict[tuple[int, int], float] | None = None  # (gpu, xid) -> count, when the exporter has it
    xid_counts: dict[tuple[int, int], float] | None = None
    metrics: set[str] = field(default_factory=set)  # the DCGM metric names present (what this exporter supplies)

    def gpu(self, index: int, uuid: str) -> GpuReading:
        reading = self.gpus.get(index)
        if reading is None:
            self.gpus[index] = reading = GpuReading(index=index, uuid=uuid)
        return reading


def parse_exposition(text: str) -> Scrape:
    """Parse dcgm-exporter's text; raises ValueError on text that is not Prometheus exposition.

    >>> s = parse_exposition('DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a"} 652.3\\n')
    >>> s.gpus[0].stats().power_w, s.gpus[0].uuid
    (652.3, 'GPU-a')
    """
    scrape = Scrape()
    for family in text_string_to_metric_families(text):
        name = family.name  # not the sample's: the parser renames a counter's samples `<name>_total`
        if name in (XID_TOTAL, XID_COUNT):
            _table(scrape, name)  # enabled, even before its first XID: a later one counts from zero
            scrape.metrics.add(name)
        for sample in family.samples:
            labels, value = sample.labels, float(sample.value)
            if not name.startswith("DCGM_") or "gpu" not in labels:
                continue
            scrape.metrics.add(name)
            try:
                index = int(labels["gpu"])
            except ValueError:
                continue  # not a GPU entity (an NVSwitch, a CPU): not ours to map
            reading = scrape.gpu(index, labels.get("UUID") or labels.get("uuid", ""))
            if name in (XID_TOTAL, XID_COUNT):
                table = _table(scrape, name)
                xid = labels.get("xid", "")
                if xid.isdigit() and not is_blank(value):
                    table[(index, int(xid))] = table.get((index, int(xid)), 0.0) + value
                continue
            if name == XID_LAST:
                if not is_blank(value):
                    reading.xid_last = int(value)
                continue
            target = FIELDS.get(name)
            if target is None:
                continue
            if is_blank(value):
                reading.blanks += 1
            elif target in SUMMED:
                reading.values[target] = reading.values.get(target, 0.0) + value
            else:
                reading.values.setdefault(target, value)  # MIG: the first (whole-GPU) row wins
    return scrape


def _table(scrape: Scrape, name: str) -> dict[tuple[int, int], float]:
    if name == XID_TOTAL:
        if scrape.xid_totals is None:
            scrape.xid_totals = {}
        return scrape.xid_totals
    if scrape.xid_counts is None:
        scrape.xid_counts = {}
    return scrape.xid_counts


class XidTracker:
    """XIDs from successive scrapes as events: each once, none invented from the baseline.

    The exporter offers up to three views, used best first:

    * `DCGM_EXP_XID_ERRORS_TOTAL` (a counter per GPU and XID): every increase
      is that many events, so two different XIDs between scrapes and the same
      XID repeated are all seen. A counter that went down is an exporter
      restart: its new values all happened since.
    * `DCGM_EXP_XID_ERRORS_COUNT` (per GPU and XID, within a sliding window):
      an increase is new events; events that left the window while as many
      new ones entered it between two scrapes are missed.
    * `DCGM_FI_DEV_XID_ERRORS` (the default: the last XID, a gauge): a change
      is one event. Lost: a repeat of the same XID, and all but the last of
      several XIDs between two scrapes.

    The first scrape is the baseline: what it shows happened before we
    looked (possibly long ago) and is not reported, as the kernel log's
    backlog is not.
    """

    def __init__(self) -> None:
        self._last: dict[int, int] | None = None
        self._totals: dict[tuple[int, int], float] | None = None
        self._counts: dict[tuple[int, int], float] | None = None

    def events(self, scrape: Scrape, now: float) -> list[XidEvent]:
        """The XIDs this scrape reveals since the previous one."""
        last = {i: r.xid_last for i, r in scrape.gpus.items() if r.xid_last is not None}
        if scrape.xid_totals is not None:
            found = _increases(self._totals, scrape.xid_totals, resets=True)
        elif scrape.xid_counts is not None:
            found = _increases(self._counts, scrape.xid_counts, resets=False)
        else:
            seen = self._last or {}  # a GPU's first value is its baseline
            found = [(g, code) for g, code in sorted(last.items()) if code and g in seen and seen[g] != code]
        self._last = {**(self._last or {}), **last}
        if scrape.xid_totals is not None:
            self._totals = dict(scrape.xid_totals)
        if scrape.xid_counts is not None:
            self._counts = dict(scrape.xid_counts)
        return [XidEvent(gpu=g, code=code, ts=now) for g, code in found]


MAX_EVENTS_PER_KEY = 16  # one burst of the same XID is reported at most this often per scrape


def _increases(before: dict[tuple[int, int], float] | None, now: dict[tuple[int, int], float],
               *, resets: bool) -> list[tuple[int, int]]:
    """(gpu, xid) once per counted increase since `before` (None: the baseline, nothing)."""
    if before is None:
        return []
    if resets and any(now.get(k, 0.0) < v for k, v in before.items()):
        before = {}  # the exporter restarted: everything it counts now is new
    out: list[tuple[int, int]] = []
    for key in sorted(now):
        grown = int(now[key] - before.get(key, 0.0))
        out += [key] * min(max(grown, 0), MAX_EVENTS_PER_KEY)
    return out
