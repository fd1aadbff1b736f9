"""The interpreter line the benchmarks print: which Python, and how libpython is linked."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

from benchmarks.interpreter import describe


def test_a_process_with_libpython_mapped_reads_as_shared(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text("7f35 r-xp 00000000 08:01 123 /opt/python/lib/libpython3.11.so.1.0\n"
                    "7f36 r-xp 00000000 08:01 124 /lib/x86_64-linux-gnu/libc.so.6\n")
    line = describe(maps)
    assert line.startswith(f"{platform.python_implementation()} {platform.python_version()} ({sys.executable}): ")
    assert "libpython shared" in line


def test_a_process_without_it_has_libpython_in_the_executable(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text("7f36 r-xp 00000000 08:01 124 /lib/x86_64-linux-gnu/libc.so.6\n")
    assert "libpython in the executable" in describe(maps)


def test_no_maps_to_read_says_so(tmp_path: Path) -> None:
    line = describe(tmp_path / "absent")
    assert "libpython linkage unknown" in line
    assert "configured with" in line  # the configure flags are still given: "with ..." or "without ..."


def test_this_process_is_described_from_its_own_maps() -> None:
    line = describe()
    if Path("/proc/self/maps").exists():
        shared = "libpython" in Path("/proc/self/maps").read_text()
        assert ("libpython shared" if shared else "libpython in the executable") in line
    else:
        assert "libpython linkage unknown" in line
