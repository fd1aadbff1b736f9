"""`trainguard selfcheck`: stop-time diagnosis on suspect machines.

The node agent runs `trainguard selfcheck --command-json '<ActionCommand>'`
for `self_check` and `replay_regroup` commands. act fans a check out: each
machine's command carries its `node_rank` and the shared rendezvous, and
this process runs only that machine's ranks and prints its machine's report
(`machine_report`; act combines every machine's). A command without
`node_rank`, or `--machines`, runs every named machine's part on this one
host (Slurm's single-node health check, an operator by hand). It prints one
JSON object and exits 0 when the check (or this machine's part) passed, 1
when it failed, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys

import msgspec

from trainguard.schemas.action_params import MachineCheck, Replay, SelfCheck
from trainguard.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("selfcheck", help="run the hierarchical self-check or an SDC replay",
                       description="Run GPU self-test (dcgmi, if present), all-to-all within each machine, "
                       "all-gather between neighbours and a bitwise alignment test, cheapest first, stopping at "
                       "the first stage that names a machine; or one phase of a dual-phase SDC replay. A command "
                       "act fanned out (a machine_check) runs only this machine's ranks and prints its report; "
                       "--machines runs every named machine's part on this host. Prints one JSON object; "
                       "exit 0 = passed, 1 = failed, 2 = bad input.")
    p.add_argument("--command-json", metavar="JSON",
                   help="an ActionCommand (self_check or replay_regroup) as JSON, as the node agent passes it")
    p.add_argument("--machines", help="comma-separated machines to check, all on this host (instead of "
                   "--command-json)")
    p.add_argument("--checks", default="dcgm,all_to_all,all_gather,bitwise", help="stages (default: %(default)s)")
    p.add_argument("--procs-per-machine", type=int, default=2, help="ranks per machine (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=10.0, help="collective timeout in seconds (default: %(default)s)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    try:
        action, params = _request(args)
    except ValueError as exc:
        print(json.dumps({"passed": False, "error": str(exc)}))
        print(f"trainguard selfcheck: {exc}", file=sys.stderr)
        return 2
    if isinstance(params, MachineCheck):
        return _run_machine(action, params)
    from trainguard.collectors.agent.selfcheck.hierarchy import run_hierarchy, run_replay

    if isinstance(params, Replay):
        report = run_replay(params.groups, timeout_s=args.timeout if params.timeout_s is None else params.timeout_s)
        machines = [m for g in params.groups for m in g]
    else:
        ppn = params.procs_per_machine or args.procs_per_machine
        report = run_hierarchy(params.machines, checks=params.checks, ppn=ppn,
                               timeout_s=args.timeout if params.timeout_s is None else params.timeout_s)
        machines = params.machines
    phase = params.phase if isinstance(params, Replay) else None
    print(json.dumps({"action": action, "phase": phase, "machines": machines, **report.as_dict()}))
    return 0 if report.passed else 1


def _run_machine(action: str, params: MachineCheck) -> int:
    """This machine's part of a fanned-out check; act aggregates the reports."""
    from trainguard.collectors.agent.selfcheck.machine import MachineSpec, machine_passed, run_machine

    spec = MachineSpec.from_check(params)
    report = run_machine(spec)
    passed = machine_passed(report)  # this machine's own view; with others checked, act's verdict decides
    # Only a check of this machine alone vouches for it (the console returns a node on such a report);
    # with others, its own ranks can all pass while its digest is the odd one out.
    alone = {"machines": spec.machines} if len(spec.machines) == 1 else {}
    print(json.dumps({"action": action, "phase": params.phase, "check_id": spec.check_id,
                      "machine": spec.machine, **alone, "passed": passed, "machine_report": report}))
    return 0 if passed else 1


def _request(args: argparse.Namespace) -> tuple[str, SelfCheck | Replay | MachineCheck]:
    """(action, params) from --command-json or the flags; ValueError names the problem."""
    checks = [c for c in args.checks.split(",") if c]
    if args.command_json:
        from trainguard.schemas.codec import DecodeError, decode
        from trainguard.schemas.records import ActionCommand

        try:
            command = decode(args.command_json, ActionCommand)
        except DecodeError as exc:
            raise ValueError(f"--command-json: {exc}") from None
        p = command.params
        if isinstance(p, MachineCheck):
            return command.action, p
        if isinstance(p, Replay):
            if not p.groups:
                raise ValueError("--command-json: replay_regroup needs params.groups (lists of machines)")
            return "replay_regroup", p
        if not isinstance(p, SelfCheck):
            raise ValueError(f"--command-json: action {command.action!r} is not self_check or replay_regroup")
        params = msgspec.structs.replace(p, machines=p.machines or list(command.nodes), checks=p.checks or checks)
    elif args.machines:
        params = SelfCheck(machines=[m for m in args.machines.split(",") if m], checks=checks)
    else:
        raise ValueError("give --command-json or --machines")
    if not params.machines:
        raise ValueError("no machines to check")
    return "self_check", params
