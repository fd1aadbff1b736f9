"""Which Python ran a benchmark, and how it was built: two builds of one version differ by a fifth.

On this project's 2-core machine the worker drained the same backlog 1.15-1.5x
faster under Debian's CPython 3.11 (libpython linked into the executable) than
under a default pyenv build of 3.11 (libpython as a shared library, configured
without `--enable-optimizations`), while the C floors it is judged against
moved less (docs/sizing.md, "The interpreter"). A figure that does not say
which interpreter gave it cannot be compared with another, so the benchmarks
print this line next to the load.
"""

from __future__ import annotations

import platform
import sys
import sysconfig
from pathlib import Path

_OPTIMISING_FLAGS = ("--enable-optimizations", "--with-lto")


def describe(maps: Path = Path("/proc/self/maps")) -> str:
    """One line: implementation, version, executable, how libpython is linked, and the optimising configure flags.

    Whether libpython is a shared library is read from what this process has
    mapped (Linux), not from `Py_ENABLE_SHARED`: Debian configures with
    `--enable-shared` yet links the `python3.11` executable statically.
    """
    args = str(sysconfig.get_config_var("CONFIG_ARGS") or "")
    flags = [f for f in _OPTIMISING_FLAGS if f in args]
    configured = f"with {' '.join(flags)}" if flags else "without --enable-optimizations"
    return (f"{platform.python_implementation()} {platform.python_version()} ({sys.executable}): "
            f"{_libpython(maps)}, configured {configured}")


def _libpython(maps: Path) -> str:
    try:
        mapped = maps.read_text()
    except OSError:
        return "libpython linkage unknown"
    return "libpython shared" if "libpython" in mapped else "libpython in the executable"
