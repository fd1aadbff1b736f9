"""The building blocks moved to schemas (Bounded, ids, the node->job join) are the ones detectors and act use."""

from __future__ import annotations

import pickle

from trainguard.detectors import base, common
from trainguard.schemas import node_jobs
from trainguard.schemas.bounded import Bounded, bounded_evictions
from trainguard.schemas.ids import anomaly_id


def test_detectors_re_export_the_same_objects() -> None:
    assert common.Bounded is Bounded and common.bounded_evictions is bounded_evictions
    assert base.anomaly_id is anomaly_id


def test_an_id_is_the_hash_it_always_was() -> None:
    # Journals and replays compare ids: moving the helper must not change one. Pinned from the old helper.
    assert anomaly_id("incident", "j", "nan", "j", "5.000") == "7f0e685dec7a69a67126"
    assert anomaly_id("a", 1) == anomaly_id("a|1") != anomaly_id("a", 2)


def test_a_snapshot_naming_the_old_module_still_loads() -> None:
    old = Bounded(2)
    old["a"] = 1
    blob = pickle.dumps(old, protocol=0).replace(b"trainguard.schemas.bounded", b"trainguard.detectors.common")  # as a pre-move snapshot names it
    assert b"trainguard.detectors.common" in blob
    back = pickle.loads(blob)
    assert isinstance(back, Bounded) and dict(back) == {"a": 1} and back.cap == 2


def test_learning_the_same_job_again_keeps_a_bounded_tables_order() -> None:
    table: Bounded[str, str] = Bounded(2)
    assert node_jobs.learn(table, "n1", "j") and node_jobs.learn(table, "n2", "j")
    assert not node_jobs.learn(table, "n1", "j")  # unchanged: not written, n1 stays the oldest
    node_jobs.learn(table, "n3", "k")
    assert list(table) == ["n2", "n3"] and table.evicted == 1


def test_the_records_own_job_wins_over_the_table() -> None:
    table = {"n1": "j"}
    assert node_jobs.job_of(table, "n1", "other") == "other"
    assert node_jobs.job_of(table, "n1") == "j"
    assert node_jobs.job_of(table, "n2") == ""
