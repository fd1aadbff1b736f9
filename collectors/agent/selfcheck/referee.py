"""Stop every machine's ranks at the first stage that names a machine.

With the check fanned out, no single process watches every rank, so
without help each machine would run every stage even after an early one
already named a culprit (a hung rank then costs every later collective its
timeout). Global rank 0 referees instead: after each early stage, every
rank puts its record in the check's TCP store; rank 0 gathers them (all, or
what came before the others went quiet, as the old single-node coordinator
waited), judges the stage with the same pure function act uses, and posts
the machines it named (none: go on). The others wait for that word and stop
or carry on; if rank 0 never posts (it is the hung one), they carry on, as
without a referee. A rank 0 that has begun gathering (it finished the stage
later than they did) is waited for one window more: its word is coming.

One referee means one decision, so the ranks never disagree, and every
stopped rank records it (`stopped-<rank>.json`, in its machine's report as
`stopped_after` / `referee_named`). act takes that call for the stage when
its own reading of the stage names no one: a rank quiet past the window and
heard from only later (a hung rank waking up) must not turn "named" into
"nobody, and no later stage ran". Such a late rank may find rank 0 (and its
store) gone; it then stops too, naming no one (`referee_named` empty).
"""

from __future__ import annotations

import datetime
import json
import time
from typing import Any

from trainguard.schemas.selfcheck import evaluate_stage

EARLY_STOP_STAGES = ("all_to_all", "all_gather")  # bitwise is the last stage; a replay has one


def go_on(store: Any, *, stage: str, rank: int, world: int, record: dict[str, Any], machines: list[str],
          ppn: int, timeout_s: float) -> list[str]:
    """Post this rank's record for `stage`; the machines rank 0 named (stop), or [] (run the next stage)."""
    store.set(f"rec/{stage}/{rank}", json.dumps(record))
    store.add(f"count/{stage}", 1)
    word, gathering = f"decision/{stage}", f"gathering/{stage}"
    if rank == 0:
        store.set(gathering, "1")
        records = _gather(store, stage, world, timeout_s)
        named = evaluate_stage(stage, machines, records, ppn).culprits
        store.set(word, json.dumps(named))
        return named
    window = datetime.timedelta(seconds=timeout_s * 3.5)  # rank 0 gathers for 3 timeouts at most
    for _ in range(2):
        try:
            store.wait([word], window)
            return [str(m) for m in json.loads(store.get(word))]
        except Exception:  # no word within the window
            if not _started(store, gathering):
                return []  # the referee never finished the stage (hung, dead): carry on, as without one
    return []  # the referee began gathering and went silent for a second window: carry on


def _started(store: Any, key: str) -> bool:
    """Whether rank 0 has begun gathering: it finished the stage later than we did (a loaded host
    deschedules it), and its word is coming, so we wait one window more instead of running the next
    stage while it is still deciding (issue 23's CI: a healthy machine ran all_gather after n2 was named)."""
    try:
        return bool(store.check([key]))
    except Exception:  # the store is gone with rank 0
        return False


def _gather(store: Any, stage: str, world: int, timeout_s: float) -> list[dict[str, Any]]:
    """Every rank's record, or those in before the others went quiet for 1.5 timeouts (3 at most)."""
    start = last_new = time.monotonic()
    seen = 0
    while (count := int(store.add(f"count/{stage}", 0))) < world:
        now = time.monotonic()
        if count > seen:
            seen, last_new = count, now
        elif now - last_new > timeout_s * 1.5 or now - start > timeout_s * 3:
            break
        time.sleep(0.05)
    keys = [f"rec/{stage}/{r}" for r in range(world)]
    if count < world:  # only then look key by key
        keys = [k for k in keys if store.check([k])]
    return [json.loads(value) for value in store.multi_get(keys)] if keys else []
