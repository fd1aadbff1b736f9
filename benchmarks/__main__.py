"""Run every `benchmarks/bench_*.py` in turn (`python -m benchmarks [NAME ...]`).

Each benchmark runs as its own process (`python -m benchmarks.bench_<name>`),
so one that fails or leaves state behind does not affect the next; each
prints its own figures. Names given on the command line (e.g. `codec`)
select a subset; options after one name go to that benchmark
(`python -m benchmarks pipeline --compare-backpressure`).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def discover() -> list[str]:
    """Module names of all benchmarks, in name order."""
    return sorted(p.stem for p in Path(__file__).parent.glob("bench_*.py"))


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    split = next((i for i, a in enumerate(given) if a.startswith("-")), len(given))
    wanted, options = given[:split], given[split:]
    names = [n for n in discover() if not wanted or n.removeprefix("bench_") in wanted or n in wanted]
    if not names:
        print(f"no benchmark matches {wanted}; known: {', '.join(discover())}", file=sys.stderr)
        return 2
    if options and len(names) != 1:
        print(f"options {' '.join(options)} need exactly one benchmark named before them", file=sys.stderr)
        return 2
    failed = []
    for name in names:
        print(f"== {name} ==", flush=True)
        if subprocess.run([sys.executable, "-m", f"benchmarks.{name}", *options], cwd=ROOT).returncode != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
