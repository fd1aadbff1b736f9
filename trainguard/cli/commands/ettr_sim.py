"""`trainguard ettr-sim`: a fleet-scale ETTR comparison, trainguard against a baseline, and the standby-pool sweep."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from trainguard.cli.commands.needs_lab import needs_lab
from trainguard.settings import Settings

if TYPE_CHECKING:
    from trainguard.lab.ettr_sim import SimParams, TraceHistory

TRACE_IN_SHARED = Path("shared") / "data" / "infinitehbd"
T = TypeVar("T", int, float)


def default_trace() -> Path:
    """`../shared/data/infinitehbd` beside the repository (as in CI), else beside the nearest folder above it
    that has one (a git worktree nested a level deeper), else the first, to be named in the error."""
    repo = Path(__file__).resolve().parents[3]
    for parent in repo.parents:
        if (parent / TRACE_IN_SHARED).is_dir():
            return parent / TRACE_IN_SHARED
    return repo.parent / TRACE_IN_SHARED


def _listed(kind: Callable[[str], T]) -> Callable[[str], list[T]]:
    def parse(text: str) -> list[T]:
        try:
            return [kind(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    return parse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("ettr-sim", help="simulate a big job's ETTR with and without trainguard",
                       description="Resample incident arrivals from the real InfiniteHBD fault trace for a large "
                       "job, give them ByteRobust's incident mix, and compare the ETTR of trainguard's recovery "
                       "with a fail-stop/manual baseline, with the breakdown of unproductive time. With --sweep, "
                       "map the standby pool size against over-eviction instead. "
                       "Deterministic given --seed. See docs/ettr-simulation.md for every parameter.")
    p.add_argument("--trace", type=Path, metavar="DIR",
                   help="InfiniteHBD trace directory or fault_trace.json (default: ../shared/data/infinitehbd "
                   "next to the repository, or next to a folder above it)")
    p.add_argument("--nodes", type=int, default=1200, help="nodes in the job (default 1200)")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--days", type=float, default=90.0, help="length of the run (default 90)")
    p.add_argument("--checkpoint-interval-s", type=float, default=1800.0)
    p.add_argument("--standby-pool", type=int, default=12, help="warm standby nodes (default 12)")
    p.add_argument("--over-evict-nodes", type=int, default=8,
                   help="nodes evicted when localisation names several suspects (the smallest parallel group "
                   "holding them; default 8); 1 = never over-evict, run a stop-time diagnosis instead")
    p.add_argument("--pool-aware", action="store_true",
                   help="diagnose instead of requeueing when the free pool is smaller than the group")
    p.add_argument("--diagnosis-s", type=float, default=600.0,
                   help="stop-time self-check that names one culprit instead of over-evicting (default 600)")
    p.add_argument("--standby-replenish-s", type=float, default=4 * 3600.0,
                   help="until a standby that replaced a faulty node is itself replaced (default 14400)")
    p.add_argument("--healthy-return-s", type=float, default=3600.0,
                   help="until an over-evicted healthy node passes its self-check and rejoins the pool "
                   "(default 3600)")
    p.add_argument("--rate-scale", type=float, default=1.0, help="multiply the trace's fault rate")
    p.add_argument("--latencies", type=Path, metavar="REPORT",
                   help="backtest report.json: use its per_kind.*.latency_median_s as detection latencies")
    p.add_argument("--costs", type=Path, metavar="REPORT",
                   help="checkpoint benchmark report (benchmarks/bench_checkpoint.py): take trainguard's "
                   "checkpoint overhead, checkpoint interval and restart times from it")
    p.add_argument("--restart-floor-s", type=float, default=0.0,
                   help="with --costs: seconds added to each measured restart for the job-wide rendezvous "
                   "and collective init a small benchmark does not pay (default 0)")
    p.add_argument("--checkpoint-overhead", type=float, metavar="FRACTION",
                   help="with --costs: per-step checkpoint overhead to assume instead of the measured one "
                   "(e.g. 0.009, ByteRobust's figure, where the benchmark machine's CPUs were oversubscribed)")
    p.add_argument("--seed", type=int, default=0, help="the seed (with --sweep: the first of --seeds seeds)")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the full result as JSON")
    s = p.add_argument_group("sweep (--sweep): every job size x pool size x group size, each over --seeds seeds")
    s.add_argument("--sweep", action="store_true", help="sweep the standby pool against over-eviction")
    s.add_argument("--sweep-nodes", type=_listed(int), default=[1200, 12500], metavar="N,N",
                   help="job sizes in nodes (default 1200,12500: 9,600 and 100,000 GPUs)")
    s.add_argument("--sweep-pools", type=_listed(float), default=[0, 0.25, 0.5, 1, 2, 4], metavar="PCT,PCT",
                   help="pool sizes as percent of the job's nodes (default 0,0.25,0.5,1,2,4)")
    s.add_argument("--sweep-groups", type=_listed(int), default=[1, 2, 4, 8, 16], metavar="G,G",
                   help="over-eviction group sizes; 1 = diagnose instead (default 1,2,4,8,16)")
    s.add_argument("--seeds", type=int, default=5, help="seeds per cell (default 5)")
    s.add_argument("--plot", type=Path, metavar="PNG", help="write the sweep's plot")
    s.add_argument("--markdown", type=Path, metavar="FILE", help="write the sweep's tables as Markdown")
    p.set_defaults(handler=run)


@needs_lab("ettr-sim")
def run(args: argparse.Namespace, settings: Settings) -> int:
    from trainguard.lab.ettr_sim import ParamError, TraceHistory
    from trainguard.lab.telemetry_sim.trace import TraceError, load_trace

    args.trace = args.trace or default_trace()
    if not args.trace.exists():
        print(f"trainguard ettr-sim: --trace: InfiniteHBD trace not found at {args.trace} (expected "
              "../shared/data/infinitehbd next to the repository; see docs/ettr-simulation.md)", file=sys.stderr)
        return 2
    try:
        params = _params(args)
        history = TraceHistory.from_events(load_trace(args.trace), servers=params.trace_servers)
        report = _sweep(args, history, params) if args.sweep else _single(args, history, params)
    except (TraceError, ParamError, ValueError) as exc:
        print(f"trainguard ettr-sim: {exc}", file=sys.stderr)
        return 2
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def _params(args: argparse.Namespace) -> SimParams:
    from trainguard.lab.ettr_sim import JobParams, SimParams, with_measured_latencies
    from trainguard.lab.ettr_sim.measured import with_measured_recovery

    params = SimParams(rate_scale=args.rate_scale, job=JobParams(
        nodes=args.nodes, gpus_per_node=args.gpus_per_node, days=args.days,
        checkpoint_interval_s=args.checkpoint_interval_s))
    costs = replace(params.trainguard, standby_pool=args.standby_pool, over_evict_nodes=args.over_evict_nodes,
                    pool_aware=args.pool_aware, diagnosis_s=args.diagnosis_s,
                    standby_replenish_s=args.standby_replenish_s, healthy_return_s=args.healthy_return_s)
    if args.latencies is not None:
        costs = with_measured_latencies(costs, args.latencies)
    params = replace(params, trainguard=costs)
    if args.costs is not None:
        params = with_measured_recovery(params, args.costs, restart_floor_s=args.restart_floor_s,
                                        overhead=args.checkpoint_overhead)
    return params.validate()


def _single(args: argparse.Namespace, history: TraceHistory, params: SimParams) -> dict[str, Any]:
    from trainguard.lab.ettr_sim import simulate
    from trainguard.lab.ettr_sim.report import print_report, to_json

    result = simulate(history, params, seed=args.seed)
    print_report(result)
    return to_json(result)


def _sweep(args: argparse.Namespace, history: TraceHistory, params: SimParams) -> dict[str, Any]:
    from trainguard.lab.ettr_sim import ParamError
    from trainguard.lab.ettr_sim.params import as_dict
    from trainguard.lab.ettr_sim.sweep import sweep
    from trainguard.lab.ettr_sim.sweep_report import plot_sweep, print_sweep, sweep_json, sweep_markdown

    if args.seeds < 1:
        raise ParamError(f"--seeds: must be >= 1 (got {args.seeds})")
    seeds = list(range(args.seed, args.seed + args.seeds))
    points = sweep(history, params, nodes=args.sweep_nodes, pool_percents=args.sweep_pools,
                   groups=args.sweep_groups, seeds=seeds)
    print_sweep(points)
    if args.plot is not None:
        plot_sweep(points, args.plot)
        print(f"wrote {args.plot}")
    if args.markdown is not None:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(sweep_markdown(points))
        print(f"wrote {args.markdown}")
    return {"seeds": seeds, "points": sweep_json(points), "params": as_dict(params)}
