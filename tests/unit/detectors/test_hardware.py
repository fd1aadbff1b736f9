"""hw_fault and the XID table: what evicts, what does not, counters and resets."""

from __future__ import annotations

import pytest

from trainguard.detectors.hardware import HardwareDetector
from trainguard.detectors.xid import classify
from trainguard.schemas.records import GpuStats, LogEvent, NodeGpuSample, XidEvent


def sample(ts: float, *, xids: list[int] = (), nvml_ok: bool = True, **gpu0: object) -> NodeGpuSample:
    gpus = [GpuStats(index=0, **gpu0), GpuStats(index=1)]  # type: ignore[arg-type]
    return NodeGpuSample(ts=ts, node="n7", job="j", nvml_ok=nvml_ok,
                         gpus=gpus if nvml_ok else [], xids=[XidEvent(gpu=0, code=c, ts=ts - 1) for c in xids])


@pytest.mark.parametrize("code,severity", [
    (13, "application"), (31, "application"), (43, "application"), (45, "application"),
    (48, "fatal"), (63, "fatal"), (64, "fatal"), (74, "fatal"), (79, "fatal"), (92, "fatal"),
    (94, "fatal"), (95, "fatal"), (119, "fatal"), (120, "fatal"), (4242, "unknown"),
])
def test_xid_table(code: int, severity: str) -> None:
    assert classify(code).severity == severity


@pytest.mark.parametrize("first,second,fires,cause", [
    ({}, {"xids": [13]}, False, None),
    ({}, {"xids": [31, 43]}, False, None),
    ({}, {"xids": [79]}, True, "xid"),
    ({}, {"xids": [48]}, True, "xid"),
    ({"ecc_dbe": 2}, {"ecc_dbe": 3}, True, "ecc_dbe_growth"),
    ({"ecc_dbe": 2}, {"ecc_dbe": 2}, False, None),
    ({"ecc_dbe": 9}, {"ecc_dbe": 0}, False, None),  # a reset is not growth
    ({"remapped_uncorrectable": 1}, {"remapped_uncorrectable": 2}, True, "remap_uncorrectable_growth"),
    ({}, {"remap_failed": True}, True, "remap_failed"),
    ({}, {"lost": True}, True, "gpu_lost"),
    ({"nvlink_errors": 100}, {"nvlink_errors": 105}, False, None),
    ({"nvlink_errors": 100}, {"nvlink_errors": 160}, True, "nvlink_burst"),
    ({}, {"ecc_sbe": 50, "temp_c": 95.0}, False, None),  # not a hw fault on its own
])
def test_one_sample_is_enough(first: dict[str, object], second: dict[str, object], fires: bool,
                              cause: str | None) -> None:
    d = HardwareDetector()
    xids = second.pop("xids", [])  # type: ignore[arg-type]
    assert d.observe(sample(10.0, **first)) == []
    out = d.observe(sample(20.0, xids=xids, **{**first, **second}))  # type: ignore[arg-type]
    assert bool(out) == fires
    if fires:
        assert out[0].kind == "hw_fault" and out[0].nodes == ["n7"] and out[0].gpus == ["n7:0"]
        assert out[0].evidence["findings"][0]["cause"] == cause
        assert out[0].job == "j"


def test_counter_reset_then_growth_fires_again_from_the_new_baseline() -> None:
    d = HardwareDetector()
    d.observe(sample(0.0, ecc_dbe=5))
    assert d.observe(sample(10.0, ecc_dbe=0)) == []
    assert d.observe(sample(20.0, ecc_dbe=1)) != []


def test_unobserved_sample_changes_nothing() -> None:
    d = HardwareDetector()
    d.observe(sample(0.0, ecc_dbe=1))
    assert d.observe(sample(10.0, nvml_ok=False)) == []
    assert d.observe(sample(20.0, ecc_dbe=2)) != []  # growth measured against the last *observed* value


def test_vanished_gpu_is_lost_and_repeats_are_deduplicated() -> None:
    d = HardwareDetector()
    d.observe(sample(0.0))
    gone = NodeGpuSample(ts=10.0, node="n7", gpus=[GpuStats(index=0)])
    out = d.observe(gone)
    assert out and out[0].gpus == ["n7:1"] and out[0].evidence["findings"][0]["cause"] == "gpu_missing"
    assert d.observe(NodeGpuSample(ts=20.0, node="n7", gpus=[GpuStats(index=0)])) == []
    assert d.observe(sample(30.0, xids=[79])) != []
    assert d.observe(sample(40.0, xids=[79])) == []  # same GPU, same code, within the cooldown


def test_extra_fatal_xids_are_configurable() -> None:
    assert HardwareDetector(extra_fatal_xids=[13]).observe(sample(1.0, xids=[13])) != []


@pytest.mark.parametrize("line,code", [
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.", 79),
    ("NVRM: Xid (PCI:0000:86:00): 48, pid=99, DBE (double bit error) ECC error", 48),
    ("NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception", None),
    ("training step 100: loss 2.3", None),
])
def test_xid_from_kernel_log_lines(line: str, code: int | None) -> None:
    from trainguard.schemas.records import LogEvent

    d = HardwareDetector()
    d.observe(sample(0.0))
    out = d.observe(LogEvent(ts=5.0, node="n7", level="error", source="kernel", message=line))
    assert [a.evidence["findings"][0]["code"] for a in out] == ([code] if code else [])
    if code:
        assert out[0].job == "j"  # the node's job, learned from its samples
        assert d.observe(sample(6.0, xids=[code])) == []  # the same XID from NVML is not a second finding


def test_nvml_calls_timing_out_are_a_hardware_suspect_naming_the_node() -> None:
    d = HardwareDetector()
    d.observe(NodeGpuSample(ts=1.0, node="n3", job="j", gpus=[GpuStats(index=i) for i in range(8)]))
    assert d.observe(NodeGpuSample(ts=11.0, node="n3", job="j", nvml_ok=False, error="NVML unavailable: no driver")) == []
    out = d.observe(NodeGpuSample(ts=21.0, node="n3", job="j", nvml_ok=False,
                                  error="NVML call timed out after 5.0s"))
    assert [(a.kind, a.nodes, a.job, a.evidence["findings"][0]["cause"]) for a in out] == [
        ("hw_fault", ["n3"], "j", "nvml_timeout")]
    assert d.observe(NodeGpuSample(ts=31.0, node="n3", job="j", nvml_ok=False,
                                   error="NVML call still hung (over 5.0s); not retrying yet")) == []  # cooled down


@pytest.mark.parametrize("action", [1, 2, 3, 4])
def test_a_gpu_recovery_action_other_than_none_is_a_fault(action: int) -> None:
    d = HardwareDetector()
    d.observe(NodeGpuSample(ts=1.0, node="n0", gpus=[GpuStats(index=0), GpuStats(index=1)]))
    out = d.observe(NodeGpuSample(ts=2.0, node="n0", gpus=[GpuStats(index=0), GpuStats(index=1,
                                                                                     recovery_action=action)]))
    assert [(a.gpus, a.evidence["findings"][0]["cause"]) for a in out] == [(["n0:1"], "recovery_action")]


@pytest.mark.parametrize("code", [13, 31, 43, 45])
def test_benign_xids_never_produce_an_eviction_even_in_a_burst(code: int) -> None:
    d = HardwareDetector()
    out = []
    for t in range(50):
        xids = [XidEvent(gpu=g, code=code, ts=float(t)) for g in range(8)]
        out += d.observe(NodeGpuSample(ts=float(t), node="n0", gpus=[GpuStats(index=g) for g in range(8)], xids=xids))
        out += d.observe(LogEvent(ts=float(t), node="n0", level="error", source="kernel",
                                  message=f"NVRM: Xid (PCI:0000:3b:00): {code}, pid=1234, Ch 00000010"))
    assert out == []


def test_xid_154_is_judged_by_the_recovery_action_it_names() -> None:
    assert classify(154, "GPU recovery action changed from 0x0 (None) to 0x1 (Reset Required)").severity == "fatal"
    assert classify(154, "GPU recovery action changed from 0x1 (Reset Required) to 0x0 (None)").severity != "fatal"
    assert classify(46).severity == "fatal" and classify(74).severity == "fatal"


def _bursts_as_before(stream: list[tuple[float, int]], burst: int, window: float) -> list[float]:
    """The NVLink burst rule as the deque-based code before issue 23 applied it: when it fired."""
    from collections import deque

    last, held, fired = stream[0][1], deque[tuple[float, int]](), []
    for ts, errors in stream[1:]:
        growth = errors - last if errors >= last else 0
        if growth > 0 or held:
            if growth:
                held.append((ts, growth))
            while held and ts - held[0][0] > window:
                held.popleft()
            if sum(n for _, n in held) >= burst:
                fired.append(ts)
                held.clear()
        last = errors
    return fired


@pytest.mark.parametrize("seed", range(12))
def test_nvlink_bursts_fire_as_the_deque_did_across_windows_resets_and_quiet_stretches(seed: int) -> None:
    """The bursts are a tuple now (no deque per GPU); growth, expiry and the reset after a finding are kept."""
    import random

    rng = random.Random(seed)
    ts, errors, stream = 0.0, rng.randrange(50), []
    for _ in range(300):
        ts += rng.choice((1.0, 5.0, 30.0, 90.0))
        roll = rng.random()
        errors = 0 if roll < 0.03 else errors + (rng.randrange(12) if roll < 0.5 else 0)  # resets, growth, quiet
        stream.append((ts, errors))
    det = HardwareDetector(nvlink_burst=20, nvlink_window_s=120.0, cooldown_s=0.0)  # every firing reported
    fired = [a.ts for ts_, n in stream for a in det.observe(sample(ts_, nvlink_errors=n))
             if any(c["cause"] == "nvlink_burst" for c in a.evidence["findings"])]
    expected = _bursts_as_before(stream, 20, 120.0)
    assert fired == expected and len(expected) >= 2
