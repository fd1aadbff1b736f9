"""Instructions and cache misses per event of the worker's hot path, counted, not timed (a benchmark, not a test).

Run: `python -m benchmarks instructions [--scale 512,12500] [--events N]`.

Why counts: on this project's shared 2-core machines one run of the same code
at the same size differs from the next by up to 20-40 % in CPU time
(docs/sizing.md), so no lever worth less than that can be told apart, and
whether the cost per event grows with the fleet because of more work or
because the state no longer fits the caches could only be argued. Valgrind's
cachegrind executes the process on a simulated CPU: the instructions it
counts do not depend on what else the machine does (the same binary, inputs
and hash seed gave counts within a few thousand instructions of each other in
3.6 billion, 4e-7, one run beside another on a loaded machine), and it
simulates the first-level and last-level data caches, with the host's cache
sizes, so a miss is counted too.

What is counted is the same work as `bench_detectors --scale`: the worker's
pure part (`BatchLoop._process` with the task built as `trainguard worker`
builds it, its collector policy, the scaling mix with RDMA). Each size runs
three child processes under cachegrind, each building the same state from the
same records (`PYTHONHASHSEED=0`, no BLAS threads), warming it on `--warm-s` seconds of the
mix and processing `--events` more. Then each generates the next `--events` events
fetch by fetch, as the mix's simulator makes them, and:

* `generate` drops each fetch;
* `process` runs each fetch through the hot path just after it was made;
* `decode` instead only decodes each fetch's events (the codec, as the decode
  floor of `bench_pipeline` does).

`process - generate` is the hot path on those events, `decode - generate`
their decoding alone: the natural baseline, in the same unit. Each fetch is
made just before it is used, as a worker's fetch arrives fresh from its
socket: a segment encoded in advance is tens of megabytes of cold input, and
where those bytes landed decided how many misses copying them took (stop 50
counted memcpy's misses moving by 40 % with nothing on its path changed).
A child leaves with `os._exit`, so no teardown is counted. The children are
independent, so they run side by side on the machine's cores: sharing a core
changes no count.

A count is not a time. An instruction that waits for memory costs far more
than one that hits the first-level cache; this benchmark reports the misses
beside the instructions so that "more work" and "more waiting" can be told
apart, and leaves the conversion to time to `bench_detectors`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks.bench_gc import Raw
    from trainguard.streams.worker.batch_loop import BatchLoop

STAGES = ("generate", "process", "decode")
# The same hash seed in every run; and no BLAS thread pool (numpy's OpenBLAS starts one at import), whose
# idle threads spin for as long as the machine lets them: 0.15 % more or fewer instructions from run to run.
REPEATABLE = {"PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Counts:
    """One cachegrind run's totals: instructions, and data misses at the first and the last level."""

    instructions: int
    d1_misses: int
    ll_misses: int

    def __sub__(self, other: Counts) -> Counts:
        return Counts(self.instructions - other.instructions, self.d1_misses - other.d1_misses,
                      self.ll_misses - other.ll_misses)


@dataclass(frozen=True)
class SizeCounts:
    """One fleet size: the events of the measured segment and what processing and decoding them took."""

    nodes: int
    events: int
    generate: Counts  # building the state and generating the segment, kept to check that a run repeats
    process: Counts
    decode: Counts
    caches: tuple[str, ...]
    functions: dict[str, Counts]  # the hot path's counts per C function (process less generate)

    def per_event(self, counts: Counts) -> tuple[float, float, float]:
        n = self.events or 1
        return counts.instructions / n, counts.d1_misses / n, counts.ll_misses / n


def parse_cachegrind(text: str) -> tuple[Counts, tuple[str, ...]]:
    """The totals of a cachegrind output file (its `events:` and `summary:` lines) and its cache lines.

    >>> counts, caches = parse_cachegrind("desc: D1 cache: 32768 B, 64 B, 8-way associative\\n"
    ...     "events: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw\\nsummary: 100 1 1 40 4 2 20 3 1\\n")
    >>> counts, caches
    (Counts(instructions=100, d1_misses=7, ll_misses=3), ('D1 cache: 32768 B, 64 B, 8-way associative',))
    """
    names: list[str] = []
    values: list[int] = []
    caches: list[str] = []
    for line in text.splitlines():
        if line.startswith("events:"):
            names = line.split()[1:]
        elif line.startswith("summary:"):
            values = [int(v) for v in line.split()[1:]]
        elif line.startswith("desc:") and "cache:" in line:
            caches.append(line.removeprefix("desc:").strip())
    total = dict(zip(names, values))
    if "Ir" not in total or "D1mr" not in total:
        raise ValueError("not a cachegrind output with the cache simulation on (no Ir or D1mr totals)")
    return _counts(total), tuple(caches)


def _counts(total: dict[str, int]) -> Counts:
    return Counts(total["Ir"], total["D1mr"] + total.get("D1mw", 0), total["DLmr"] + total.get("DLmw", 0))


def per_function(text: str) -> dict[str, Counts]:
    """A cachegrind output file's counts summed per function (`fn=` blocks, over all their source lines).

    The interpreter's own loop is one function for all Python code, so what this tells apart is the C
    underneath: dict lookups, the allocator, the collector, msgspec, the event loop's C parts.

    >>> text = ("events: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw\\nfl=a.c\\nfn=f\\n1 10 0 0 4 2 1 1 1 0\\n"
    ...         "2 5\\nfn=g\\n7 1 0 0 0 0 0 0 0 0\\nfl=b.c\\nfn=f\\n3 1 0 0 1 1 1\\n")
    >>> per_function(text)
    {'f': Counts(instructions=16, d1_misses=4, ll_misses=2), 'g': Counts(instructions=1, d1_misses=0, ll_misses=0)}
    """
    names: list[str] = []
    sums: dict[str, list[int]] = {}
    current: list[int] | None = None
    for line in text.splitlines():
        if line.startswith("fn="):
            current = sums.setdefault(line[3:], [0] * len(names))
        elif line[:1].isdigit() and current is not None:
            for i, value in enumerate(line.split()[1:]):  # trailing zeros may be left out
                current[i] += int(value)
        elif line.startswith("events:"):
            names = line.split()[1:]
    return {fn: _counts(dict(zip(names, values))) for fn, values in sums.items()}


def host_last_level(cache_dir: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> str | None:
    """The host's last-level cache as cachegrind's `--LL=size,ways,line`, read from sysfs; None when unknown.

    Cachegrind's own detection can get a virtual machine's last level wrong (here it read 256 MiB,
    direct-mapped, for a 32 MiB 16-way L3), and a cache larger than it is hides exactly the misses this
    benchmark is for. Cachegrind needs the number of sets to be a power of two; a cache it cannot
    simulate as it is gives None (and cachegrind's own choice, printed with the figures).

    >>> import tempfile; d = Path(tempfile.mkdtemp())
    >>> for name, text in {"level": "3", "type": "Unified", "size": "32768K", "ways_of_associativity": "16",
    ...                    "coherency_line_size": "64"}.items():
    ...     _ = (d / "index3").mkdir(exist_ok=True), (d / "index3" / name).write_text(text)
    >>> host_last_level(d), host_last_level(d / "nowhere")
    ('33554432,16,64', None)
    """
    best: tuple[int, str] | None = None
    for index in sorted(cache_dir.glob("index*")):
        try:
            level = int((index / "level").read_text())
            if (index / "type").read_text().strip() == "Instruction":
                continue
            size_text = (index / "size").read_text().strip()
            size = int(size_text.rstrip("KkMm")) * (1 << 20 if size_text[-1] in "Mm" else 1 << 10)
            ways = int((index / "ways_of_associativity").read_text())
            line = int((index / "coherency_line_size").read_text())
        except (OSError, ValueError, IndexError):
            continue
        sets = size // max(1, ways * line)
        if sets > 0 and sets & (sets - 1) == 0 and (best is None or level > best[0]):
            best = (level, f"{size},{ways},{line}")
    return best[1] if best else None


def child_command(nodes: int, warm_s: float, events: int, job_nodes: int, stage: str, out_file: Path,
                  last_level: str | None = None) -> list[str]:
    """The cachegrind command line of one child run."""
    ll = [f"--LL={last_level}"] if last_level else []
    return ["valgrind", "--tool=cachegrind", "--cache-sim=yes", *ll, f"--cachegrind-out-file={out_file}",
            sys.executable, "-m", "benchmarks.bench_instructions", "--child", stage, "--scale", str(nodes),
            "--warm-s", str(warm_s), "--events", str(events), "--job-nodes", str(job_nodes)]


@dataclass(frozen=True)
class ChildRun:
    """One stage's run: its totals, the simulated caches, the segment's events and the totals per function."""

    counts: Counts
    caches: tuple[str, ...]
    segment: int
    functions: dict[str, Counts]


def run_child(nodes: int, warm_s: float, events: int, job_nodes: int, stage: str) -> ChildRun:
    """Run one stage under cachegrind and read what it counted."""
    with tempfile.TemporaryDirectory(prefix="tg-cachegrind-") as tmp:
        out_file = Path(tmp) / "cachegrind.out"
        env = {**os.environ, **REPEATABLE}
        command = child_command(nodes, warm_s, events, job_nodes, stage, out_file, host_last_level())
        done = subprocess.run(command, cwd=ROOT, env=env,
                              capture_output=True, text=True, check=False)
        if done.returncode != 0 or not out_file.exists():
            raise RuntimeError(f"the {stage} run at {nodes} nodes failed (exit {done.returncode}): "
                               f"{done.stderr.strip().splitlines()[-1:] or done.stdout.strip()[-200:]}")
        text = out_file.read_text()
    counts, caches = parse_cachegrind(text)
    segment = next((int(line.split()[-1]) for line in done.stdout.splitlines() if line.startswith("segment events")), 0)
    return ChildRun(counts, caches, segment, per_function(text))


def measure(nodes: int, warm_s: float, events: int, job_nodes: int, jobs: int) -> SizeCounts:
    """The three stages of one size, side by side on `jobs` cores, and their differences."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        runs = dict(zip(STAGES, pool.map(lambda s: run_child(nodes, warm_s, events, job_nodes, s), STAGES)))
    generate, process, decode = runs["generate"], runs["process"], runs["decode"]
    if process.segment != decode.segment:
        raise RuntimeError(f"the process and decode runs measured different segments ({process.segment} and "
                           f"{decode.segment} events)")
    zero = Counts(0, 0, 0)
    if generate.segment != process.segment:
        raise RuntimeError(f"the generate and process runs made different segments ({generate.segment} and "
                           f"{process.segment} events)")
    functions = {fn: counts - generate.functions.get(fn, zero) for fn, counts in process.functions.items()}
    return SizeCounts(nodes, process.segment, generate.counts, process.counts - generate.counts,
                      decode.counts - generate.counts, generate.caches, functions)


def _warmed(nodes: int, warm_s: float, events: int, job_nodes: int) -> tuple[BatchLoop, Iterator[list[Raw]]]:
    """The hot loop warmed on `warm_s` seconds and `events` events of the mix, and the mix's generator after them."""
    from benchmarks.bench_detectors import _mix  # the child's imports, not the parent's
    from benchmarks.bench_gc import as_fetch, hot_loop
    from benchmarks.fleet_mix import events_per_node_s

    loop = hot_loop(like_worker=True)
    fetches = _mix(nodes, job_nodes)
    warm = int(warm_s * nodes * events_per_node_s(rdma=True)) + events
    for batch in _take(fetches, warm):
        loop._process(as_fetch(batch))  # noqa: SLF001 - the hot path itself, without a broker
    return loop, fetches


def _take(fetches: Iterator[list[Raw]], events: int) -> Iterator[list[Raw]]:
    """Whole fetches until at least `events` events were taken."""
    taken = 0
    while taken < events:
        batch = next(fetches)
        taken += len(batch)
        yield batch


def child(stage: str, nodes: int, warm_s: float, events: int, job_nodes: int) -> None:
    """Build the state, then make the segment fetch by fetch and run the stage on each fetch as it is made;
    leave without teardown, which would be counted."""
    from benchmarks.bench_gc import as_fetch
    from trainguard.schemas.codec import Codec
    from trainguard.streams.worker import heap

    heap.settle_after_startup()  # the worker's collector policy, as bench_detectors runs it
    loop, fetches = _warmed(nodes, warm_s, events, job_nodes)
    decode = Codec().decode
    made = 0
    for batch in _take(fetches, events):
        made += len(batch)
        fetch = as_fetch(batch)
        if stage == "process":
            loop._process(fetch)  # noqa: SLF001
        elif stage == "decode":
            for records in fetch.values():
                for record in records:
                    decode(record.value)
        del batch, fetch
    print(f"segment events {made}", flush=True)
    os._exit(0)


def print_table(sizes: Sequence[SizeCounts]) -> None:
    """Per event: the hot path's instructions and misses, decoding's, and each size against the first."""
    first = sizes[0]
    print(f"{'nodes':>7} {'events':>8} {'instr/event':>12} {'vs first':>9} {'D1 miss/ev':>11} {'LL miss/ev':>11} "
          f"{'vs first':>9} {'decode instr/ev':>16} {'hot/decode':>11}")
    base_ir, _, base_ll = first.per_event(first.process)
    for s in sizes:
        ir, d1, ll = s.per_event(s.process)
        dec_ir, _, _ = s.per_event(s.decode)
        print(f"{s.nodes:>7,} {s.events:>8,} {ir:>12,.0f} {ir / base_ir:>9.2f} {d1:>11.1f} {ll:>11.2f} "
              f"{(ll / base_ll if base_ll else float('nan')):>9.2f} {dec_ir:>16,.0f} {ir / dec_ir:>11.2f}")


def print_functions(sizes: Sequence[SizeCounts], top: int) -> None:
    """The C functions with the most last-level misses per event at the largest size, and theirs at each size."""
    largest = max(sizes, key=lambda s: s.nodes)
    ranked = sorted(largest.functions.items(), key=lambda kv: -kv[1].ll_misses)[:top]
    head = " ".join(f"{f'LL/ev @{s.nodes:,}':>14} {f'D1/ev @{s.nodes:,}':>14}" for s in sizes)
    print("where the misses are: the hot path per C function, per event (the interpreter's loop is one function)")
    print(f"  {'function':<32} {head}")
    zero = Counts(0, 0, 0)
    for fn, _ in ranked:
        cells = []
        for s in sizes:
            _, d1, ll = s.per_event(s.functions.get(fn, zero))
            cells.append(f"{ll:>14.2f} {d1:>14.1f}")
        print(f"  {fn[:32]:<32} {' '.join(cells)}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_instructions",
                                description="Instructions and cache misses per event of the worker's hot path "
                                "at several fleet sizes, counted by valgrind's cachegrind (a benchmark, not a test).")
    p.add_argument("--scale", default="512,12500", help="fleet sizes in nodes, comma-separated (default: %(default)s)")
    p.add_argument("--events", type=int, default=60_000, help="events in the measured segment (default: %(default)s)")
    p.add_argument("--warm-s", type=float, default=3.0, help="seconds of the mix before it (default: %(default)s)")
    p.add_argument("--job-nodes", type=int, default=4096, help="largest job, in nodes (default: %(default)s)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="child runs side by side (default: cores)")
    p.add_argument("--top", type=int, default=12, help="C functions to list by misses (0: none; default: %(default)s)")
    p.add_argument("--child", choices=STAGES, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    try:
        sizes = [int(s) for s in args.scale.split(",") if s.strip()]
    except ValueError:
        print(f"bench_instructions: --scale {args.scale!r}: not a comma-separated list of node counts", file=sys.stderr)
        return 2
    if not sizes or min(sizes) < 1 or args.events < 1:
        print("bench_instructions: --scale and --events need positive numbers", file=sys.stderr)
        return 2
    if args.child:
        child(args.child, sizes[0], args.warm_s, args.events, args.job_nodes)
    if shutil.which("valgrind") is None:
        print("bench_instructions: valgrind not found (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    from benchmarks.interpreter import describe

    print(f"interpreter: {describe()}")
    print(f"the worker's hot path per event (BatchLoop._process, as bench_detectors --scale), counted by cachegrind: "
          f"{args.events:,} events after {args.warm_s:g} s of the mix and as many events again; jobs of at most "
          f"{args.job_nodes:,} nodes", flush=True)
    results = []
    for nodes in sizes:
        try:
            results.append(measure(nodes, args.warm_s, args.events, args.job_nodes, args.jobs))
        except RuntimeError as err:
            print(f"bench_instructions: {err}", file=sys.stderr)
            return 2
    print("simulated caches: " + "; ".join(results[0].caches))
    print_table(results)
    if args.top > 0:
        print_functions(results, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
