"""The dcgm-exporter source on dcgm-exporter's own exposition text (tests/fixtures/dcgm_exporter).

Parsing runs on the fixture files; the collector scrapes them over real HTTP
from a local server (tests/dcgm_server.py), which can also fail as an
exporter does: HTTP 500, a hang, non-Prometheus text, no DCGM field at all.
"""

from __future__ import annotations

import time

import pytest
from dcgm_server import FIXTURES, DcgmExporterFixture
from fakes import ListSink

from trainguard.collectors.dcgm_exporter import XidTracker, parse_exposition
from trainguard.collectors.dcgm_source import SOURCE, DcgmExporterCollector
from trainguard.collectors.metrics import CollectorMetrics
from trainguard.collectors.node import NodeLoop
from trainguard.detectors.hardware import HardwareDetector
from trainguard.schemas.records import NodeGpuSample


def scrape(name: str):  # type: ignore[no-untyped-def]
    return parse_exposition((FIXTURES / name).read_text())


def test_default_counters_map_to_the_nvml_fields() -> None:
    gpus = scrape("default_healthy.prom").gpus
    assert sorted(gpus) == [0, 1]
    g0 = gpus[0].stats()
    assert g0.uuid == "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"
    assert (g0.util_pct, g0.sm_clock_mhz, g0.mem_used_mb, g0.power_w, g0.temp_c) == (97.0, 1980.0, 68348.0, 652.317, 61.0)
    assert (g0.pcie_replays, g0.remapped_correctable, g0.remapped_uncorrectable, g0.remap_failed) == (0, 0, 0, False)
    # Not in default-counters.csv: left at the healthy default, never guessed.
    assert (g0.max_sm_clock_mhz, g0.ecc_dbe, g0.nvlink_errors, g0.throttle_reasons) == (0.0, 0, 0, 0)
    assert gpus[0].xid_last == 0 and not g0.lost


def test_every_enabled_counter_is_read() -> None:
    s = scrape("full_healthy.prom")
    g1 = s.gpus[1].stats()
    assert (g1.max_sm_clock_mhz, g1.ecc_sbe, g1.ecc_dbe, g1.remap_pending, g1.recovery_action) == (1980.0, 2, 0, False, 0)
    assert s.gpus[0].stats().nvlink_errors == 1  # the four NVLink error counters are summed, as NVML's are
    assert scrape("full_nvlink_burst_gpu0.prom").gpus[0].stats().nvlink_errors == 52
    throttled = scrape("full_throttled_gpu1.prom").gpus[1].stats()
    assert (throttled.throttle_reasons, throttled.sm_clock_mhz) == (0x48, 1035.0)
    assert "DCGM_EXP_XID_ERRORS_TOTAL" in s.metrics and s.xid_totals == {}


def test_a_gpu_whose_fields_all_read_blank_is_lost() -> None:
    gpus = scrape("default_gpu1_off_bus.prom").gpus
    assert gpus[1].stats().lost and gpus[1].xid_last == 79
    assert not gpus[0].stats().lost


def test_the_last_xid_gauge_gives_one_event_per_change_and_none_for_the_baseline() -> None:
    xids = XidTracker()
    assert xids.events(scrape("default_xid13_gpu0.prom"), 1.0) == []  # before we looked: not reported
    assert [(e.gpu, e.code) for e in xids.events(scrape("default_xid79_gpu1.prom"), 2.0)] == [(1, 79)]
    assert xids.events(scrape("default_xid79_gpu1.prom"), 3.0) == []  # the same gauge again: no duplicate


def test_the_xid_total_counter_catches_two_xids_between_scrapes_and_repeats() -> None:
    xids = XidTracker()
    assert xids.events(scrape("full_healthy.prom"), 1.0) == []
    assert [(e.gpu, e.code) for e in xids.events(scrape("full_two_xids_gpu1.prom"), 2.0)] == [(1, 13), (1, 79)]
    assert [(e.gpu, e.code) for e in xids.events(scrape("full_xid79_again_gpu1.prom"), 3.0)] == [(1, 79), (1, 79)]
    assert xids.events(scrape("full_xid79_again_gpu1.prom"), 4.0) == []


def test_gauge_only_loses_all_but_the_last_xid_between_scrapes() -> None:
    """What the docs say is lost without DCGM_EXP_XID_ERRORS_TOTAL: the 13 before the 79."""
    gauge_only = XidTracker()
    gauge_only.events(scrape("default_healthy.prom"), 1.0)
    assert [e.code for e in gauge_only.events(scrape("default_xid79_gpu1.prom"), 2.0)] == [79]


def test_an_exporter_restart_resets_its_totals_and_what_it_counts_since_is_new() -> None:
    xids = XidTracker()
    xids.events(scrape("full_xid79_again_gpu1.prom"), 1.0)  # 13=1, 79=3
    assert [(e.gpu, e.code) for e in xids.events(scrape("full_dbe_gpu0.prom"), 2.0)] == [(0, 48)]


def test_text_that_is_not_prometheus_exposition_raises() -> None:
    with pytest.raises(ValueError):
        parse_exposition("DCGM_FI_DEV_GPU_TEMP{gpu=0 61\n")


@pytest.fixture
def exporter():  # type: ignore[no-untyped-def]
    with DcgmExporterFixture("default_healthy.prom") as served:
        yield served


def test_the_collector_stamps_node_and_job_and_reports_its_source(exporter: DcgmExporterFixture) -> None:
    c = DcgmExporterCollector(node="gpu-node-7", job="llm", url=exporter.url, timeout_s=2.0)
    [sample] = c.collect(100.0)
    assert (sample.node, sample.job, sample.source, sample.nvml_ok, len(sample.gpus)) == ("gpu-node-7", "llm", SOURCE,
                                                                                          True, 2)
    exporter.serve("default_xid79_gpu1.prom")
    [sample] = c.collect(101.0)
    assert [(x.gpu, x.code, x.ts) for x in sample.xids] == [(1, 79, 101.0)]
    c.close()


def test_a_gpu_that_left_the_exposition_is_reported_lost(exporter: DcgmExporterFixture) -> None:
    c = DcgmExporterCollector(node="n", url=exporter.url, timeout_s=2.0)
    c.collect(1.0)
    exporter.serve("default_gpu1_missing.prom")
    [sample] = c.collect(2.0)
    assert [(g.index, g.lost) for g in sample.gpus] == [(0, False), (1, True)]
    assert sample.gpus[1].uuid == "GPU-1b3e9f0a-77c2-4d1e-9a41-5c8e2f7d3b10"
    c.close()


@pytest.mark.parametrize(("mode", "fixture", "why"), [
    ("error", "default_healthy.prom", "HTTP 500"),
    ("garbage", "default_healthy.prom", "sent no Prometheus text"),
    ("ok", "no_dcgm_fields.prom", "host engine"),
    ("hang", "default_healthy.prom", "no answer within 0.5s"),
])
def test_a_failing_exporter_leaves_the_node_unobserved_never_healthy(exporter: DcgmExporterFixture, mode: str,
                                                                    fixture: str, why: str) -> None:
    c = DcgmExporterCollector(node="n", url=exporter.url, timeout_s=0.5)
    c.collect(1.0)
    exporter.serve(fixture, mode)
    [sample] = c.collect(2.0)
    assert not sample.nvml_ok and sample.gpus == [] and why in sample.error
    if mode == "hang":
        [again] = c.collect(3.0)  # the hung scrape is not piled on
        assert not again.nvml_ok and "still not answering" in again.error
    c.close()


def test_an_unreachable_exporter_is_unobserved() -> None:
    c = DcgmExporterCollector(node="n", url="http://127.0.0.1:9/metrics", timeout_s=2.0)
    [sample] = c.collect(1.0)
    assert not sample.nvml_ok and "unreachable" in sample.error
    c.close()


def test_the_node_loop_reports_the_collector_failed_while_the_exporter_errs(exporter: DcgmExporterFixture) -> None:
    sink, metrics = ListSink(), CollectorMetrics()
    loop = NodeLoop(sink=sink, metrics=metrics)  # type: ignore[arg-type]
    loop.add(DcgmExporterCollector(node="n", url=exporter.url, timeout_s=1.0), interval_s=1.0)
    [scheduled] = loop._scheduled
    loop.run_once(scheduled)
    exporter.serve("default_healthy.prom", "error")
    loop.run_once(scheduled)
    success = metrics.registry.get_sample_value("trainguard_collector_success", {"collector": "dcgm_exporter"})
    assert success == 0.0 and [s.nvml_ok for s in sink.of(NodeGpuSample)] == [True, False]
    loop.close()


def test_hardware_detector_sees_the_same_faults_and_not_an_exporter_hang(exporter: DcgmExporterFixture) -> None:
    c = DcgmExporterCollector(node="n", url=exporter.url, timeout_s=0.5)
    det = HardwareDetector()
    for t, (fixture, mode) in enumerate([("default_healthy.prom", "ok"), ("default_healthy.prom", "hang"),
                                         ("default_gpu1_off_bus.prom", "ok")]):
        exporter.serve(fixture, mode)
        time.sleep(0.6 if t == 2 else 0)  # the hung scrape's own socket timeout (0.5 s) ends it first
        found = [a for s in c.collect(float(t)) for a in det.observe(s)]
        if t < 2:
            assert found == []  # an exporter that hangs is not a GPU that hangs
    causes = sorted(f["cause"] for a in found for f in a.evidence["findings"])
    assert causes == ["gpu_lost", "xid"] and found[0].gpus == ["n:1"]
    c.close()
