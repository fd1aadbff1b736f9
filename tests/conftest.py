"""Shared fixtures. Broker tests use the real local Kafka broker.

`make test` starts the broker before pytest and stops it after. Run alone,
the `kafka` fixture starts it itself (and leaves it running for the next
run). Each test gets its own topic prefix, so tests never see each other's
messages.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from trainguard.lab.localkafka.broker import LocalBroker
from trainguard.schemas.plan import PlannedAction
from trainguard.schemas.records import Decision, Incident, TrainingStep
from trainguard.schemas.signing import generate
from trainguard.settings import Settings, load_settings


@pytest.fixture(scope="session")
def kafka() -> Iterator[str]:
    """Bootstrap servers of a live local broker (started if needed)."""
    settings = load_settings()
    broker = LocalBroker(settings.broker)
    if broker.pid() is None and not _answers(broker):
        broker.start()
    broker.topics()  # proves it answers; raises otherwise, never skips
    yield settings.broker.servers


def _answers(broker: LocalBroker) -> bool:
    """A broker started elsewhere (another checkout, `make demo`) is as good as ours."""
    try:
        broker.topics(timeout_s=5)
        return True
    except Exception:
        return False


ACT_ACTS = {"TRAINGUARD_ACTIONS__ROLLOUT__DEFAULT": "auto"}


@pytest.fixture(scope="session", autouse=True)
def act_acts() -> Iterator[None]:
    """Every `trainguard act` a test starts (in-process or as a subprocess of os.environ) acts: rollout mode
    `auto`, set explicitly, since a new install only observes. A test of `observe` or `approve` sets its own
    TRAINGUARD_ACTIONS__ROLLOUT__* (or builds ActionSettings, which reads no environment)."""
    saved = {k: os.environ.get(k) for k in ACT_ACTS}
    os.environ.update(ACT_ACTS)
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def topic_prefix() -> str:
    """A topic prefix unique to this test."""
    return f"t{uuid.uuid4().hex[:10]}."


class TestKeys:
    """Signing keys made for the test run, as `trainguard keys generate` makes them (there is no default)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        generate(root, "act")
        generate(root, "worker")
        generate(root, "console")

    def node(self, *names: str) -> TestKeys:
        """Make node keys (once each); call before starting `act`, which reads them at start."""
        for name in names:
            if not (self.root / "nodes" / f"{name}.key").exists():
                generate(self.root / "nodes", name)
        return self

    def security(self, *, job_records: str = "trusted") -> dict[str, Any]:
        """The `security:` section using these keys.

        `job_records="trusted"` (what most tests need) sets `job_records_trusted_by_acl: true`
        explicitly: those tests hand-write a job's checkpoints and topologies, playing a job that
        runs without `trainguard run` agents (nobody mints attempt keys). `"signed"` leaves the
        product default: act uses only records signed by the job's current attempt.
        """
        (self.root / "nodes").mkdir(exist_ok=True)
        trust = {"job_records_trusted_by_acl": True} if job_records == "trusted" else {}
        return {**trust, "act_private_key": str(self.root / "act.key"), "act_public_keys": [str(self.root / "act.pub")],
                "node_private_key": str(self.root / "nodes" / "{node}.key"),
                "node_public_keys": [str(self.root / "nodes")],
                "console_private_key": str(self.root / "console.key"),
                "console_public_keys": [str(self.root / "console.pub")],
                "worker_private_key": str(self.root / "worker.key"),
                "worker_public_keys": [str(self.root / "worker.pub")]}

    def signed(self, value: bytes, record: object) -> list[tuple[str, bytes]] | None:
        """Headers for a record a test publishes: an incident signed with the worker's key (act acts only on
        those by default), anything else unsigned. A test that hand-writes incidents plays the worker."""
        from trainguard.schemas.signing import load_signer

        return load_signer(self.root / "worker.key").headers(value) if isinstance(record, Incident) else None

    def env(self, *, job_records: str = "trusted", **extra: Any) -> dict[str, str]:
        """The `security:` section as TRAINGUARD_SECURITY__* variables, for a `trainguard` subprocess."""
        section = {**self.security(job_records=job_records), **extra}
        return {f"TRAINGUARD_SECURITY__{k.upper()}": json.dumps(v) if isinstance(v, list) else str(v)
                for k, v in section.items()}


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> TestKeys:
    """Keys shared by the session's tests (node keys are added on demand)."""
    return TestKeys(tmp_path_factory.mktemp("keys"))


@pytest.fixture
def settings_factory(kafka: str, topic_prefix: str, tmp_path: os.PathLike[str], keys: TestKeys):  # type: ignore[no-untyped-def]
    """Build Settings pointing at the live broker with this test's prefix (and the session's keys)."""

    def make(**overrides: object) -> Settings:
        base: dict[str, object] = {
            "topics": {"prefix": topic_prefix, "partitions": 2},
            "worker": {"app_id": f"w-{topic_prefix}", "state_dir": str(tmp_path) + "/worker"},
            "actions": {"group_id": f"a-{topic_prefix}"},
            "security": keys.security(),
        }
        base.update(overrides)
        return load_settings(None, **base)

    return make


# ------------------------------------------------------------------ record factories
# One builder per record the unit tests write by the hundred, each with the suite's defaults (job "j",
# node "n", one rank): a test names only the fields its case is about. Keywords override any field.


@pytest.fixture
def step_factory() -> Callable[..., TrainingStep]:
    """A `TrainingStep`: `step_factory(step=3)` is step 3 of rank 0 of job "j" on node "n", ending at t=3 after 1 s."""

    def make(step: int = 1, **fields: Any) -> TrainingStep:
        defaults: dict[str, Any] = {"ts": float(step), "job": "j", "rank": 0, "node": "n", "loss": 1.0,
                                    "step_time_s": 1.0}
        return TrainingStep(step=step, **{**defaults, **fields})

    return make


@pytest.fixture
def incident_factory() -> Callable[..., Incident]:
    """An `Incident` of job "j" detected at `ts` (100 s), its onset 5 s before, from anomaly "a1"."""

    def make(kind: str = "hang", **fields: Any) -> Incident:
        ts = float(fields.pop("ts", 100.0))
        defaults: dict[str, Any] = {"id": "i1", "job": "j", "onset": ts - 5, "detected_at": ts,
                                    "anomaly_ids": ["a1"]}
        return Incident(ts=ts, kind=kind, **{**defaults, **fields})  # type: ignore[arg-type]

    return make


@pytest.fixture
def decision_factory() -> Callable[..., Decision]:
    """A `Decision` of incident "i1" of job "j": evict node "n1" for a hardware fault, planned by rule "r"."""

    def make(**fields: Any) -> Decision:
        defaults: dict[str, Any] = {"ts": 1.0, "id": "d1", "incident_id": "i1", "job": "j", "kind": "hw_fault",
                                    "rule": "r", "reason": "why",
                                    "plan": [PlannedAction(action="evict_node", nodes=["n1"])]}
        return Decision(**{**defaults, **fields})

    return make
