"""Run every `benchmarks/bench_*.py` in turn (`python -m benchmarks [NAME ...]`).

Each module exposes `main(argv) -> int` and prints its own figures. Names
given on the command line (e.g. `codec`) select a subset.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path


def discover() -> list[str]:
    """Module names of all benchmarks, in name order."""
    return sorted(p.stem for p in Path(__file__).parent.glob("bench_*.py"))


def main(argv: Sequence[str] | None = None) -> int:
    wanted = list(sys.argv[1:] if argv is None else argv)
    names = [n for n in discover() if not wanted or n.removeprefix("bench_") in wanted or n in wanted]
    if not names:
        print(f"no benchmark matches {wanted}; known: {', '.join(discover())}", file=sys.stderr)
        return 2
    status = 0
    for name in names:
        print(f"== {name} ==", flush=True)
        module = importlib.import_module(f"benchmarks.{name}")
        status |= int(module.main([]) or 0)
    return status


if __name__ == "__main__":
    sys.exit(main())
