"""nan at 256 nodes: the origin is the rank that reported the NaN at the earliest step, whatever arrives first."""

from __future__ import annotations

import math
import random

from trainguard.detectors.nan import NanDetector
from trainguard.schemas.records import Anomaly, TrainingStep

NODES, GPUS = 256, 8
WORLD = NODES * GPUS


def step(rank: int, step_no: int, ts: float, *, loss: float = 2.0, grad: float = 1.0) -> TrainingStep:
    return TrainingStep(ts=ts, job="big", rank=rank, node=f"n{rank // GPUS:03d}", step=step_no, loss=loss,
                        grad_norm=grad)


def run(records: list[TrainingStep], det: NanDetector) -> list[Anomaly]:
    out = [a for r in records for a in det.observe(r)]
    return out + det.tick(max(r.ts for r in records) + 60.0)


def healthy(det: NanDetector, upto: int) -> None:
    for s in range(1, upto):
        run([step(r, s, 10.0 * s + r * 1e-4) for r in range(WORLD)], det)


def test_the_origins_nan_loss_wins_though_its_clock_runs_ahead_and_it_arrives_last_of_2048_ranks() -> None:
    det, origin = NanDetector(), 1537
    healthy(det, 5)
    rng = random.Random(3)
    peers = [step(r, 5, 50.0 + rng.uniform(-2.0, 0.5), grad=math.nan) for r in range(WORLD) if r != origin]
    rng.shuffle(peers)  # arrival order is anyone's
    late = step(origin, 5, 51.9, loss=math.nan, grad=math.nan)  # its host clock 1.9 s fast; delivered last
    [found] = run([*peers, late], det)
    assert (found.ranks, found.nodes, found.step) == ([origin], [f"n{origin // GPUS:03d}"], 5)


def test_a_later_steps_records_arriving_before_the_origins_do_not_take_the_blame() -> None:
    det, origin = NanDetector(), 777
    healthy(det, 5)
    # every rank's step 6 (NaN everywhere by then) overtakes the origin's step-5 record, all within a second
    after = [step(r, 6, 60.0 + r * 1e-4, loss=math.nan, grad=math.nan) for r in range(WORLD) if r % 97 == 0]
    first = step(origin, 5, 50.0, grad=math.inf)  # the origin alone had the overflow at step 5
    [found] = run([*after, first], det)
    assert (found.ranks, found.step) == ([origin], 5)
