"""`trainguard act --executor slurm` against a REAL Slurm cluster, and the shipped health check.

Real: slurmctld, three slurmd (`slurmd -N gnK`, one host) and munged from
Debian's slurm-wlm (installed by `make tools`, started by tools/slurm.sh
under a private SLURM_CONF), the Kafka broker, `trainguard act` and
`trainguard selfcheck` as processes, and deploy/slurm/trainguard-healthcheck.sh
run by slurmd itself as its HealthCheckProgram and as the jobs' Prolog. Faults are injected into the
self-check with TRAINGUARD_SELFCHECK_FAULT (no GPU here).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka import KafkaProducer

from trainguard.schemas.codec import Codec
from trainguard.schemas.records import Incident
from trainguard.schemas.topics import Topics, key_for
from trainguard.streams.admin import ensure_topics

# Every job start runs the self-check prolog on a shared machine: generous deadlines, no timings.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def free_base_port(count: int = 4) -> int:
    """A run of `count` free TCP ports (slurmctld + one per slurmd)."""
    for base in range(21000 + os.getpid() % 5000, 65000, 7):
        try:
            for port in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free ports")


class Slurm:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
        self.healthcheck = root / "healthcheck"

    def run(self, *args: str, check: bool = True, env: dict[str, str] | None = None) -> str:
        proc = subprocess.run(list(args), capture_output=True, text=True, timeout=120, env=env or self.env)
        if check:
            assert proc.returncode == 0, f"{args}: {proc.stdout}{proc.stderr}"
        return proc.stdout + proc.stderr

    def node(self, name: str) -> str:
        return self.run("scontrol", "show", "node", name)

    def job(self, job_id: str) -> str:
        return self.run("scontrol", "show", "job", job_id)

    def wait(self, what: str, predicate: object, timeout_s: float = 90) -> None:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if predicate():  # type: ignore[operator]
                return
            time.sleep(0.5)
        raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(autouse=True)
def cancel_jobs(request: pytest.FixtureRequest) -> Iterator[None]:
    """A failed test must not leave a job holding nodes for the next one."""
    yield
    if "slurm" in request.fixturenames:
        cluster = request.getfixturevalue("slurm")
        cluster.run("scancel", "--user=root", check=False)
        for node in ("gn1", "gn2"):
            if "DRAIN" in cluster.node(node):
                cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slurm]:
    root = tmp_path_factory.mktemp("slurm")
    conf = root / "healthcheck.conf"
    # What an admin puts in /etc/default/trainguard-healthcheck; gn3's all-to-all hangs.
    conf.write_text(f"TRAINGUARD_BIN={BIN / 'trainguard'}\nSCONTROL=$(command -v scontrol)\n"
                    f"PATH={BIN}:{os.environ['PATH']}\nSLURM_CONF={root / 'slurm.conf'}\nexport SLURM_CONF\n"
                    "TRAINGUARD_HEALTHCHECK_CHECKS=dcgm,all_to_all\nTRAINGUARD_HEALTHCHECK_TIMEOUT=4\n"
                    "export TRAINGUARD_SELFCHECK_FAULT=gn3:hang\n")
    wrapper = root / "healthcheck"
    wrapper.write_text(f"#!/bin/sh\nPATH={os.environ['PATH']}\nexport PATH\nexport TRAINGUARD_HEALTHCHECK_CONF={conf}\n"
                       f"exec {ROOT / 'deploy/slurm/trainguard-healthcheck.sh'}\n")
    wrapper.chmod(0o755)
    extra = (f"HealthCheckProgram={wrapper}\nHealthCheckInterval=3600\nHealthCheckNodeState=ANY\n"
             f"Prolog={wrapper}\nPrologFlags=Alloc\n")
    proc = subprocess.run([str(ROOT / "tools/slurm.sh"), "start", str(root), "3", str(free_base_port())],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "SLURM_EXTRA_CONF": extra})
    cluster = Slurm(root)
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        yield cluster
    finally:
        subprocess.run([str(ROOT / "tools/slurm.sh"), "stop", str(root)], timeout=60)


def test_slurmd_runs_the_health_check_and_drains_a_failing_node(slurm: Slurm) -> None:
    slurm.wait("gn3 drained by its health check", lambda: "Reason=trainguard selfcheck failed" in slurm.node("gn3"),
               timeout_s=300)
    assert "Reason=trainguard selfcheck failed: all_to_all" in slurm.node("gn3")
    for node in ("gn1", "gn2"):  # healthy nodes pass the same check
        assert "DRAIN" not in slurm.node(node), slurm.node(node)


def test_as_prolog_a_failing_check_keeps_the_job_off_the_node(slurm: Slurm) -> None:
    slurm.wait("gn3 drained by its health check", lambda: "DRAIN" in slurm.node("gn3"))
    slurm.run("scontrol", "update", "NodeName=gn3", "State=RESUME")
    job = slurm.run("sbatch", "--parsable", "-w", "gn3", "--requeue", "-o", "/dev/null", "--wrap", "sleep 600").strip()
    # Slurm runs the script as the job's prolog on gn3; it fails there (injected hang), so the
    # node is drained and the job goes back to the queue instead of running on a bad node.
    slurm.wait("gn3 drained by the prolog", lambda: "DRAIN" in slurm.node("gn3"), timeout_s=300)
    slurm.wait(f"job {job} requeued", lambda: "JobState=PENDING" in slurm.job(job), timeout_s=180)
    assert "Restarts=" in slurm.job(job) and "Restarts=0" not in slurm.job(job)
    slurm.run("scancel", job)


def test_act_drains_and_requeues_then_a_passing_check_resumes(slurm: Slurm, kafka: str, topic_prefix: str,
                                                              tmp_path: Path, keys: Any) -> None:
    started = tmp_path / "batch-started"
    job = slurm.run("sbatch", "--parsable", "-N2", "-w", "gn1,gn2", "--requeue", "-o", "/dev/null",
                    "--wrap", f"touch {started}; sleep 600").strip()
    # The batch script starts only after every node's Prolog (our health check) finished. A Prolog
    # check still running when act drains gn1 would pass and resume it, undoing the drain.
    slurm.wait(f"job {job} started", started.exists, timeout_s=300)

    config = tmp_path / "trainguard.yaml"
    config.write_text(yaml.safe_dump({
        "broker": {"bootstrap": kafka}, "topics": {"prefix": topic_prefix, "partitions": 2},
        "actions": {"executor": "slurm", "state_dir": str(tmp_path / "act"), "group_id": f"a-{topic_prefix}",
                    "command_timeout_s": 1.0, "breaker_max_fraction": 1.0, "cooldown_s": 0},
        "security": keys.node("gn1", "gn2").security()}))  # act needs node keys even when run alone
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=2, replication=1)
    act = subprocess.Popen([str(BIN / "trainguard"), "--config", str(config), "act", "--executor", "slurm",
                            "--max-incidents", "1", "--timeout", "120", "--log", str(tmp_path / "decisions.jsonl")],
                           env=slurm.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        now = time.time()
        incident = Incident(ts=now, id="inc-slurm-1", kind="hw_fault", job=job, onset=now, detected_at=now,
                            nodes=["gn1"])
        producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
        value = Codec().encode(incident)
        producer.send(topics.for_record(incident), key=key_for(incident), value=value,
                      headers=keys.signed(value, incident))  # as the worker signs it
        producer.flush()
        producer.close()
        out, _ = act.communicate(timeout=150)
    finally:
        if act.poll() is None:
            act.kill()
    assert act.returncode == 0, out
    node = slurm.node("gn1")
    assert "DRAIN" in node and "Reason=trainguard: hw_fault (inc-slurm-1)" in node, node
    assert "Restarts=1" in slurm.job(job), slurm.job(job)  # requeued by act
    # Back in the queue (after the requeue's clean-up, longer with a prolog), and not on gn1.
    slurm.wait(f"job {job} pending", lambda: "JobState=PENDING" in slurm.job(job), timeout_s=180)

    # The node's next health check (as slurmd runs it: only SLURMD_NODENAME set) passes and resumes it.
    slurm.run(str(slurm.healthcheck), env={"SLURMD_NODENAME": "gn1"})
    assert "DRAIN" not in slurm.node("gn1"), slurm.node("gn1")
    # A node drained by someone else is left alone even when its check passes.
    slurm.run("scontrol", "update", "NodeName=gn2", "State=DRAIN", "Reason=admin: bios update")
    slurm.run(str(slurm.healthcheck), env={"SLURMD_NODENAME": "gn2"})
    assert "Reason=admin: bios update" in slurm.node("gn2")
    slurm.run("scontrol", "update", "NodeName=gn2", "State=RESUME")
    slurm.run("scancel", job)


def test_sbatch_example_runs_one_agent_per_node(slurm: Slurm, kafka: str, topic_prefix: str, tmp_path: Path,
                                                keys: Any) -> None:
    """deploy/slurm/train.sbatch as shipped, with a one-line trainer instead of torchrun."""
    from kafka import KafkaConsumer

    from trainguard.schemas.records import LogEvent
    from trainguard.schemas.topics import TOPIC_OF_TAG

    config = tmp_path / "trainguard.yaml"
    keys.node("gn1", "gn2")  # each agent signs its results with its own node key
    config.write_text(yaml.safe_dump({"broker": {"bootstrap": kafka}, "topics": {"prefix": topic_prefix, "partitions": 2},
                                      "security": keys.security()}))
    trainer = tmp_path / "train.py"
    trainer.write_text("import os\nprint('step 1 loss 2.5 on', os.environ.get('SLURMD_NODENAME'))\n")
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=2, replication=1)
    env = {**slurm.env, "PATH": f"{BIN}:{os.environ['PATH']}", "TG_CONFIG": str(config), "TRAIN_LAUNCHER": sys.executable,
           "TRAINGUARD_COLLECTORS__AGENT__STATE_DIR": str(tmp_path / "agent"),
           "TRAINGUARD_COLLECTORS__SPOOL_DIR": str(tmp_path / "spool")}
    job = slurm.run("sbatch", "--parsable", "-N2", "-w", "gn1,gn2", "-D", str(tmp_path), "-o", str(tmp_path / "out.txt"),
                    str(ROOT / "deploy/slurm/train.sbatch"), str(trainer), env=env).strip()
    slurm.wait(f"job {job} completed", lambda: "JobState=COMPLETED" in slurm.job(job)
               or "JobState=FAILED" in slurm.job(job), timeout_s=400)
    output = (tmp_path / "out.txt").read_text()
    assert "JobState=COMPLETED" in slurm.job(job), output
    assert "step 1 loss 2.5 on gn1" in output and "step 1 loss 2.5 on gn2" in output

    consumer = KafkaConsumer(topics.prefix + TOPIC_OF_TAG["log"], bootstrap_servers=kafka,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    exits: dict[str, int | None] = {}
    deadline = time.time() + 30
    while len(exits) < 2 and time.time() < deadline:
        for messages in consumer.poll(timeout_ms=500).values():
            for m in messages:
                rec = Codec().decode(m.value)
                if isinstance(rec, LogEvent) and rec.job == job and rec.exit_code is not None:
                    exits[rec.node] = rec.exit_code
    consumer.close()
    assert exits == {"gn1": 0, "gn2": 0}, output


def test_a_lemon_is_drained_on_real_slurm_with_a_reason_naming_the_quarantine(
        slurm: Slurm, monkeypatch: pytest.MonkeyPatch) -> None:
    """`SlurmExecutor.mark_lemon` against the real slurmctld: `scontrol show node` (and `sinfo -R`) tell the admins
    why the node is out, and a release keeps it drained (still out of the pool) with a reason that says so."""
    from trainguard.actions.executors.slurm import SlurmExecutor

    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    ex = SlurmExecutor(clock=time.time)
    ex.mark_lemon("gn1", quarantined=True, reason="3 hw_fault incidents in 7 days (jobs 11, 12, 13; threshold 3)")
    shown = slurm.node("gn1")
    assert "DRAIN" in shown and "Reason=trainguard lemon: 3 hw_fault incidents in 7 days" in shown, shown
    ex.mark_lemon("gn1", quarantined=False, reason="released by alice")
    shown = slurm.node("gn1")
    assert "DRAIN" in shown and "Reason=trainguard: lemon released (released by alice)" in shown, shown
    with pytest.raises(RuntimeError, match="scontrol update"):
        ex.mark_lemon("gn9", quarantined=True, reason="no such node")  # slurmctld's own refusal, surfaced
