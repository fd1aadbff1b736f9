"""One rank of a self-check world: `python -m trainguard.collectors.agent.selfcheck.worker SPEC RANK`.

Every rank runs the requested stages in order and writes one JSON file per
stage (`<out>/<stage>-<rank>.json`) as soon as it finishes it; its machine's
runner (`collectors.agent.selfcheck.machine`) collects them. Results travel by file,
not by collective, so a hung peer can only delay a verdict (until its
group's timeout), never swallow it. The world spans machines: global rank 0
hosts the TCP store at the rendezvous the command names, and every rank
waits there (up to `rendezvous_s`) until all have arrived, because agents
receive their commands at slightly different times. After each early
stage rank 0 says whether a machine was named and everyone stops
(`collectors.agent.selfcheck.referee`).
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from trainguard.collectors.agent.selfcheck.referee import EARLY_STOP_STAGES, go_on
from trainguard.collectors.agent.selfcheck.reference import (
    digest,
    faults_for,
    full_gradient,
    reference_step,
    shard_gradient,
)
from trainguard.schemas.selfcheck import neighbour_pairs


def main(spec_path: str, rank_arg: str) -> int:
    """Run the stages of `spec` as rank `rank`."""
    spec: dict[str, Any] = json.loads(Path(spec_path).read_text())
    rank, ppn, machines = int(rank_arg), int(spec["ppn"]), list(spec["machines"])
    machine = machines[rank // ppn]
    faults = faults_for(machine)
    timeout = datetime.timedelta(seconds=float(spec["timeout_s"]))
    world = len(machines) * ppn
    out = Path(spec["out"])
    try:
        store = _rendezvous(spec, rank, world)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
        groups = _make_groups(spec, machines, ppn, timeout)
    except Exception as exc:  # no world: every stage failed here, and says why (and who never came)
        missing = exc.missing if isinstance(exc, _Missing) else None
        for stage in spec["stages"]:
            _write(out, stage, rank, {"machine": machine, "status": "failed", "elapsed_s": 0.0,
                                      "error": f"rendezvous: {type(exc).__name__}: {_first_line(exc)}",
                                      "rendezvous_failed": True, "missing_ranks": missing})
        return 0
    for i, stage in enumerate(spec["stages"]):
        started = time.monotonic()
        try:
            detail = STAGES[stage](rank=rank, machine=machine, faults=faults, groups=groups, spec=spec)
            status = "ok"
        except Exception as exc:  # a timed-out or broken collective is a finding, not a crash
            detail, status = {"error": f"{type(exc).__name__}: {_first_line(exc)}"}, "failed"
        record = _write(out, stage, rank, {"machine": machine, "status": status,
                                           "elapsed_s": time.monotonic() - started, **detail})
        if i == len(spec["stages"]) - 1 or stage not in EARLY_STOP_STAGES:
            continue
        try:
            named = go_on(store, stage=stage, rank=rank, world=world, record=record, machines=machines, ppn=ppn,
                          timeout_s=float(spec["timeout_s"]))
        except Exception:  # rank 0's store is gone: the check stopped without this (late) rank
            named, gone = [], True
        else:
            gone = False
        if named or gone:  # rank 0 named a machine: the check ends here, for every rank
            _write(out, "stopped", rank, {"machine": machine, "after": stage, "named": named})
            return 0
    return 0


def _write(out: Path, stage: str, rank: int, record: dict[str, Any]) -> dict[str, Any]:
    """One stage's record, atomically (the machine's runner never reads half a file); returns it."""
    record = {"rank": rank, "pid": os.getpid(), "parent": os.getppid(), **record}
    tmp = out / f"{stage}-{rank}.part"
    tmp.write_text(json.dumps(record))
    os.replace(tmp, out / f"{stage}-{rank}.json")
    return record


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else ""


def _rendezvous(spec: dict[str, Any], rank: int, world: int) -> dist.Store:
    """The check's store (hosted by rank 0), once every rank of every machine has arrived."""
    wait = datetime.timedelta(seconds=float(spec.get("rendezvous_s", 60.0)))
    store = dist.TCPStore(str(spec.get("host", "127.0.0.1")), int(spec["port"]), world, is_master=rank == 0,
                          timeout=wait, wait_for_workers=False)
    prefixed = dist.PrefixStore(f"tg-selfcheck/{spec.get('check_id', '')}", store)
    prefixed.set(f"arrived/{rank}", "1")
    prefixed.add("arrived", 1)
    deadline = time.monotonic() + wait.total_seconds()
    while prefixed.add("arrived", 0) < world:
        if time.monotonic() > deadline:
            missing = [r for r in range(world) if not prefixed.check([f"arrived/{r}"])]
            raise _Missing(missing)
        time.sleep(0.05)
    return prefixed


class _Missing(TimeoutError):
    """Ranks that never reached the rendezvous: their machines' agents never started them."""

    def __init__(self, missing: list[int]) -> None:
        super().__init__(f"ranks {missing} never reached the rendezvous")
        self.missing = missing


def _make_groups(spec: dict[str, Any], machines: list[str], ppn: int, timeout: datetime.timedelta) -> dict[str, Any]:
    """Every rank creates every group, in the same order (torch requires it)."""
    ranks_of = {m: list(range(i * ppn, (i + 1) * ppn)) for i, m in enumerate(machines)}
    per_machine = {m: dist.new_group(ranks_of[m], timeout=timeout) for m in machines}
    pairs = neighbour_pairs(machines)
    pair_groups = [dist.new_group(ranks_of[a] + ranks_of[b], timeout=timeout) for a, b in pairs]
    replay = [dist.new_group([ranks_of[m][0] for m in g], timeout=timeout) for g in spec.get("groups", [])]
    return {"ranks_of": ranks_of, "machine": per_machine, "pairs": list(zip(pairs, pair_groups)), "replay": replay}


def _hang_if(faults: set[str], spec: dict[str, Any], rank: int, first_rank: int) -> None:
    if "hang" in faults and rank == first_rank:  # one stuck GPU per machine, as in real hangs
        time.sleep(float(spec["timeout_s"]) * 4)  # never joins: the peers' collective times out


def _all_to_all(*, rank: int, machine: str, faults: set[str], groups: dict[str, Any],
                spec: dict[str, Any]) -> dict[str, Any]:
    members = groups["ranks_of"][machine]
    _hang_if(faults, spec, rank, members[0])
    send = [torch.tensor([float(rank * 1000 + peer)]) for peer in members]
    recv = [torch.zeros(1) for _ in members]
    dist.all_to_all(recv, send, group=groups["machine"][machine])
    wrong = [peer for peer, got in zip(members, recv) if got.item() != float(peer * 1000 + rank)]
    if wrong:
        raise RuntimeError(f"all-to-all returned wrong data from ranks {wrong}")
    return {}


def _all_gather(*, rank: int, machine: str, faults: set[str], groups: dict[str, Any],
                spec: dict[str, Any]) -> dict[str, Any]:
    outcome: dict[str, str] = {}
    for (a, b), group in groups["pairs"]:
        if machine not in (a, b):
            continue
        members = groups["ranks_of"][a] + groups["ranks_of"][b]
        try:
            _hang_if(faults, spec, rank, groups["ranks_of"][machine][0])
            got = [torch.zeros(1) for _ in members]
            dist.all_gather(got, torch.tensor([float(rank)]), group=group)
            ok = [int(t.item()) for t in got] == sorted(members)  # gathered in group-rank order
            outcome[f"{a}|{b}"] = "ok" if ok else "wrong data"
        except Exception as exc:
            outcome[f"{a}|{b}"] = f"failed: {type(exc).__name__}"
    return {"pairs": outcome}


def _bitwise(*, rank: int, machine: str, faults: set[str], groups: dict[str, Any],
             spec: dict[str, Any]) -> dict[str, Any]:
    return {"digest": digest(reference_step(perturb="bitflip" in faults))}


def _replay(*, rank: int, machine: str, faults: set[str], groups: dict[str, Any],
            spec: dict[str, Any]) -> dict[str, Any]:
    if rank != groups["ranks_of"][machine][0]:
        return {"group": None}
    for index, members in enumerate(spec["groups"]):
        if machine in members:
            _hang_if(faults, spec, rank, rank)
            grad = shard_gradient(members.index(machine), len(members), perturb="bitflip" in faults)
            dist.all_reduce(grad, group=groups["replay"][index])
            got = digest(grad)  # every healthy group sums to the same exact gradient
            return {"group": index, "digest": got, "ok": got == digest(full_gradient())}
    return {"group": None}


STAGES = {"all_to_all": _all_to_all, "all_gather": _all_gather, "bitwise": _bitwise, "replay": _replay}

if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
