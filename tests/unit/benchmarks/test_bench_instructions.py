"""bench_instructions counts what it says: the same figures run after run, the hot path apart from making its input.

These run the real valgrind (installed by `make tools`, which `make test` runs) on a tiny fleet: a count
that moved between two identical runs would make every figure the benchmark prints meaningless.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import bench_instructions
from benchmarks.bench_instructions import Counts, parse_cachegrind


def test_the_same_run_counts_the_same_instructions_and_the_segment_costs_more_to_process_than_to_decode() -> None:
    size = bench_instructions.measure(nodes=4, warm_s=1.0, events=300, job_nodes=4096, jobs=2)
    again = bench_instructions.run_child(4, 1.0, 300, 4096, "generate")
    # Instructions and simulated misses alike do not depend on the machine's load. Not quite exact: a few
    # thousand instructions in billions follow the wall clock (4e-7 measured); spinning BLAS threads gave 1.5e-3.
    assert again.counts.instructions == pytest.approx(size.generate.instructions, rel=1e-5)
    assert again.counts.d1_misses == pytest.approx(size.generate.d1_misses, rel=1e-4)
    assert again.counts.ll_misses == pytest.approx(size.generate.ll_misses, rel=1e-3)
    assert size.events >= 300
    assert size.process.instructions > size.decode.instructions > 0  # the hot path decodes, then does more
    assert size.process.d1_misses > 0
    # The functions' counts add up to the totals, so the per-function table accounts for all of the hot path.
    assert sum(c.instructions for c in size.functions.values()) == size.process.instructions


def test_a_cachegrind_file_without_the_cache_simulation_is_refused() -> None:
    with pytest.raises(ValueError, match="cache simulation"):
        parse_cachegrind("events: Ir\nsummary: 100\n")


def test_counts_subtract_field_by_field() -> None:
    assert Counts(10, 4, 2) - Counts(3, 1, 1) == Counts(7, 3, 1)


def test_a_cache_cachegrind_cannot_simulate_is_left_to_cachegrind(tmp_path: Path) -> None:
    """12 MiB, 12-way, 64 B lines: 16,384 sets, a power of two, is taken; 30 MiB has 40,960 sets and is not."""
    index = tmp_path / "index3"
    index.mkdir()
    for name, text in {"level": "3", "type": "Unified", "ways_of_associativity": "12",
                       "coherency_line_size": "64"}.items():
        (index / name).write_text(text + "\n")
    (index / "size").write_text("12288K\n")
    assert bench_instructions.host_last_level(tmp_path) == f"{12 << 20},12,64"
    (index / "size").write_text("30720K\n")
    assert bench_instructions.host_last_level(tmp_path) is None


def test_bad_sizes_stop_with_one_line_and_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_instructions.main(["--scale", "many"]) == 2
    assert bench_instructions.main(["--scale", "512", "--events", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("bench_instructions: ") for line in err)
