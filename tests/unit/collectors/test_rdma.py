"""RDMA counters: the reader on the fixture sysfs tree, the rate arithmetic on numbers."""

from __future__ import annotations

import shutil
from pathlib import Path

from trainguard.collectors.rdma import PortCounters, RateTracker, RdmaCollector, counter_delta, read_ports

FIXTURE = Path(__file__).parents[2] / "fixtures" / "sysfs" / "class" / "infiniband"


def test_reads_fixture_tree_with_word_scaling_and_missing_files() -> None:
    ports = read_ports(FIXTURE)
    assert [(p.device, p.port, p.state) for p in ports] == [("mlx5_0", 1, "ACTIVE"), ("mlx5_1", 1, "DOWN")]
    first, second = ports
    assert (first.tx_bytes, first.rx_bytes) == (4000, 10000)  # 4-byte words
    assert first.errors == {"link_downed": 2, "symbol_errors": 7, "rcv_errors": 0, "xmit_discards": 0,
                            "link_error_recovery": 3}  # hw_counters read too
    assert (second.tx_bytes, second.rx_bytes) == (168, 0)  # absent file reads as 0
    assert second.errors["xmit_discards"] == 0  # garbage in a file reads as "no data"


def test_absent_root_means_no_ports(tmp_path: Path) -> None:
    assert read_ports(tmp_path / "nope") == []


def test_rates_wrap_and_reset() -> None:
    tracker = RateTracker()
    def port(tx: int, rx: int) -> PortCounters:
        return PortCounters(device="d", port=1, state="ACTIVE", tx_bytes=tx, rx_bytes=rx)
    assert tracker.update(10.0, [port(1000, 0)])[0].tx_bps == 0.0  # no interval yet
    p = tracker.update(12.0, [port(5000, 800)])[0]
    assert (p.tx_bps, p.rx_bps) == (2000.0, 400.0)
    wrapped = tracker.update(13.0, [port(5000, 100)])[0]  # rx went down from a low value: reset
    assert wrapped.rx_bps == 100.0
    assert counter_delta(2**64 - 10, 5) == 15
    assert counter_delta(2**32 - 100, 50) == 150


def test_collector_rates_from_a_changing_tree(tmp_path: Path) -> None:
    root = tmp_path / "infiniband"
    shutil.copytree(FIXTURE, root)
    collector = RdmaCollector(node="n0", root=root)
    collector.collect(100.0)
    (root / "mlx5_0/ports/1/counters/port_xmit_data").write_text("1250\n")  # +250 words = +1000 bytes
    sample = collector.collect(102.0)[0]
    assert sample.node == "n0" and sample.ports[0].tx_bps == 500.0 and sample.ports[0].tx_bytes == 5000
