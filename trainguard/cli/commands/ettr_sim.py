"""`trainguard ettr-sim`: a fleet-scale ETTR comparison, trainguard against a baseline."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from trainguard.cli.commands.needs_lab import needs_lab
from trainguard.settings import Settings

DEFAULT_TRACE = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "infinitehbd"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("ettr-sim", help="simulate a big job's ETTR with and without trainguard",
                       description="Resample incident arrivals from the real InfiniteHBD fault trace for a large "
                       "job, give them ByteRobust's incident mix, and compare the ETTR of trainguard's recovery "
                       "with a fail-stop/manual baseline, with the breakdown of unproductive time. "
                       "Deterministic given --seed. See docs/ettr-simulation.md for every parameter.")
    p.add_argument("--trace", type=Path, default=DEFAULT_TRACE, metavar="DIR",
                   help="InfiniteHBD trace directory or fault_trace.json (default: ../shared/data/infinitehbd "
                   "next to the repository)")
    p.add_argument("--nodes", type=int, default=1200, help="nodes in the job (default 1200)")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--days", type=float, default=90.0, help="length of the run (default 90)")
    p.add_argument("--checkpoint-interval-s", type=float, default=1800.0)
    p.add_argument("--standby-pool", type=int, default=12, help="warm standby nodes (default 12)")
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
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the full result as JSON")
    p.set_defaults(handler=run)


@needs_lab("ettr-sim")
def run(args: argparse.Namespace, settings: Settings) -> int:
    from lab.ettr_sim import JobParams, ParamError, SimParams, TraceHistory, simulate, with_measured_latencies
    from lab.ettr_sim.measured import with_measured_recovery
    from lab.ettr_sim.report import print_report, to_json
    from lab.telemetry_sim.trace import TraceError, load_trace

    if not args.trace.exists():
        print(f"trainguard ettr-sim: --trace: InfiniteHBD trace not found at {args.trace} (expected "
              "../shared/data/infinitehbd next to the repository; see docs/ettr-simulation.md)", file=sys.stderr)
        return 2
    try:
        params = SimParams(rate_scale=args.rate_scale, job=JobParams(
            nodes=args.nodes, gpus_per_node=args.gpus_per_node, days=args.days,
            checkpoint_interval_s=args.checkpoint_interval_s))
        costs = replace(params.trainguard, standby_pool=args.standby_pool)
        if args.latencies is not None:
            costs = with_measured_latencies(costs, args.latencies)
        params = replace(params, trainguard=costs)
        if args.costs is not None:
            params = with_measured_recovery(params, args.costs, restart_floor_s=args.restart_floor_s,
                                            overhead=args.checkpoint_overhead)
        params = params.validate()
        history = TraceHistory.from_events(load_trace(args.trace), servers=params.trace_servers)
        result = simulate(history, params, seed=args.seed)
    except (TraceError, ParamError, ValueError) as exc:
        print(f"trainguard ettr-sim: {exc}", file=sys.stderr)
        return 2
    print_report(result)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(to_json(result), indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0
