"""Incident to first command: how fast `trainguard act` acts, steady and after a broker outage.

Runs a broker of its own (stopped and started for the outage phase), a real
`trainguard act --executor local` process, background training traffic at
"demo load" (`--load` records/s on the training topic), and a responder that
plays the node agents (answers every command at once, so plans finish).
Each incident names its own job (topology announced first); the figure is
the time from producing the incident to seeing its first `ActionCommand` on
the actions topic, both stamped by this process's clock.

Baseline, in the same run: the bare Kafka round trip, the time from
producing a record to a plain consumer receiving it. After-outage incidents
are produced as soon as the restarted broker accepts writes, as the worker
would publish the incidents it found meanwhile.

Both ways of keeping act's state are measured in one run, on the same broker:
the local journal only (`actions.state_topic: false`) and the journal
mirrored on the compacted act-state topic (the default: a command waits for
its intent to be committed there, offsets for the batch's state).

    python -m benchmarks act [--incidents 40] [--load 500] [--outage 20]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer

from trainguard.actions.journal import Journal
from trainguard.lab.localkafka.broker import LocalBroker
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import ActionCommand, ActionResult, Incident, JobTopology, Record, TrainingStep
from trainguard.schemas.signing import generate, load_signer
from trainguard.schemas.topics import Topics, key_for
from trainguard.settings import BrokerSettings

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


NODES = ("bench-a", "bench-b")  # every job's two nodes (act reads the nodes' public keys at start)


def key_env(root: Path) -> dict[str, str]:
    """Signing keys for act and the played agents, made once, as `trainguard keys generate` does."""
    if not (root / "act.key").exists():
        generate(root, "act")
        generate(root, "worker")  # the rig plays the worker too: act acts only on incidents it signed
        for node in NODES:
            generate(root / "nodes", node)
    return {"TRAINGUARD_SECURITY__ACT_PRIVATE_KEY": str(root / "act.key"),
            "TRAINGUARD_SECURITY__NODE_PUBLIC_KEYS": f'["{root / "nodes"}"]',
            "TRAINGUARD_SECURITY__WORKER_PUBLIC_KEYS": f'["{root / "worker.pub"}"]',
            # The rig hand-writes topologies and mints no attempt keys: a job without agents, by name.
            "TRAINGUARD_SECURITY__JOB_RECORDS_TRUSTED_BY_ACL": "true"}


class Rig:
    """Producer, command watcher + agent responder (signing as each node), background load."""

    def __init__(self, servers: str, topics: Topics, keys: Path) -> None:
        self.servers, self.topics, self.codec = servers, topics, Codec()
        self.signers = {node: load_signer(keys / "nodes" / f"{node}.key") for node in NODES}
        self.worker = load_signer(keys / "worker.key")
        self.producer = KafkaProducer(bootstrap_servers=servers, acks="all", linger_ms=0, retries=50,
                                      reconnect_backoff_max_ms=500)
        self.first_command: dict[str, float] = {}
        self.sent_at: dict[str, float] = {}
        self.stop = threading.Event()
        self.load_paused = threading.Event()

    def send(self, record: Record) -> None:
        value = self.codec.encode(record)
        node = getattr(record, "node", "")
        headers = (self.signers[node].headers(value) if isinstance(record, ActionResult)
                   else self.worker.headers(value) if isinstance(record, Incident) else None)
        self.producer.send(self.topics.for_record(record), key=key_for(record), value=value, headers=headers)

    def watch(self) -> None:
        consumer = KafkaConsumer(self.topics.name("actions"), bootstrap_servers=self.servers, group_id=None,
                                 auto_offset_reset="earliest", reconnect_backoff_max_ms=500)
        while not self.stop.is_set():
            for batch in consumer.poll(timeout_ms=100).values():
                now = time.time()
                for msg in batch:
                    cmd = self.codec.decode(msg.value, ActionCommand)
                    self.first_command.setdefault(cmd.incident_id, now)
                    for node in cmd.nodes:  # play the agents: every command succeeds at once
                        self.send(ActionResult(ts=now, command_id=cmd.id, action=cmd.action, status="ok",
                                               job=cmd.job, node=node))
        consumer.close()

    def load(self, rate: float) -> None:
        step = 0
        while not self.stop.is_set():
            if not self.load_paused.is_set():
                for rank in range(8):
                    self.send(TrainingStep(ts=time.time(), job="load", rank=rank, node=f"l{rank}", step=step,
                                           loss=1.0, step_time_s=0.1))
            step += 1
            time.sleep(8 / rate)

    def incident(self, i: int, tag: str) -> str:
        job = f"{tag}-job-{i}"
        now = time.time()
        self.send(JobTopology(ts=now, job=job, world_size=2, rank_nodes=dict(enumerate(NODES))))
        self.producer.flush()
        iid = f"{tag}-{i}-{uuid.uuid4().hex[:6]}"
        self.sent_at[iid] = time.time()
        self.send(Incident(ts=now, id=iid, kind="nan", job=job, onset=now, detected_at=now, step=10))
        self.producer.flush()
        return iid


def bare_round_trip(servers: str, topic: str, n: int = 50) -> list[float]:
    """Produce -> plain consumer receive, per record (the natural baseline)."""
    consumer = KafkaConsumer(topic, bootstrap_servers=servers, group_id=None, auto_offset_reset="latest")
    while not consumer.assignment():
        consumer.poll(timeout_ms=100)
    for tp in consumer.assignment():
        consumer.position(tp)  # resolve "latest" now, before the first record is produced
    producer = KafkaProducer(bootstrap_servers=servers, acks="all", linger_ms=0)
    out = []
    for i in range(n):
        t0 = time.time()
        producer.send(topic, value=str(i).encode())
        producer.flush()
        got = False
        while not got and time.time() - t0 < 60:
            got = any(m.value == str(i).encode() for b in consumer.poll(timeout_ms=50).values() for m in b)
        out.append(time.time() - t0)
    producer.close()
    consumer.close()
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latencies(rig: Rig, ids: list[str], wait_s: float = 30.0) -> list[float]:
    deadline = time.time() + wait_s
    while time.time() < deadline and not all(i in rig.first_command for i in ids):
        time.sleep(0.1)
    missing = [i for i in ids if i not in rig.first_command]
    if missing:
        print(f"  {len(missing)} incident(s) got no command within {wait_s:.0f}s")
    return [rig.first_command[i] - rig.sent_at[i] for i in ids if i in rig.first_command]


def explain_missing(rig: Rig, ids: list[str], journal_path: Path) -> None:
    """For incidents that got no command: what act's journal says about them."""
    journal = Journal(journal_path)
    try:
        for iid in ids:
            if iid not in rig.first_command:
                d = journal.decision_for(iid)
                steps = [(r.action, r.status, r.message) for r in journal.steps(d.id)] if d else []
                print(f"  no command for {iid}: decision {d.status if d else None} {d.rule if d else ''} {steps}")
    finally:
        journal.close()


def measure(broker: LocalBroker, servers: str, tmp: str, args: argparse.Namespace, *, mirror: bool) -> dict[str, Any]:
    """One act (state mirroring on or off): warm up, steady incidents, a broker outage, incidents after it."""
    prefix = f"bench-act-{uuid.uuid4().hex[:6]}."
    env = {**os.environ, "TRAINGUARD_BROKER__BOOTSTRAP": servers, "TRAINGUARD_TOPICS__PREFIX": prefix,
           "TRAINGUARD_TOPICS__PARTITIONS": "4", "TRAINGUARD_ACTIONS__STATE_DIR": f"{tmp}/act-{prefix}",
           "TRAINGUARD_ACTIONS__GROUP_ID": f"g-{prefix}", "TRAINGUARD_ACTIONS__COMMAND_TIMEOUT_S": "10",
           "TRAINGUARD_ACTIONS__COOLDOWN_S": "0", "TRAINGUARD_ACTIONS__STATE_TOPIC": str(mirror).lower()}
    act_log = open(f"{args.act_log}.{'mirror' if mirror else 'journal'}", "w") if args.act_log \
        else subprocess.DEVNULL  # noqa: SIM115
    level = "info" if args.act_log else "warn"
    act = subprocess.Popen([sys.executable, "-m", "trainguard.cli", "act", "--executor", "local",
                            "--log", f"{tmp}/decisions-{prefix}.jsonl", "--loglevel", level],
                           env={**env, **key_env(Path(tmp) / "keys")}, cwd=ROOT, stdout=act_log,
                           stderr=subprocess.STDOUT)
    rig = Rig(servers, Topics(prefix), Path(tmp) / "keys")
    threads = [threading.Thread(target=rig.watch, daemon=True),
               threading.Thread(target=rig.load, args=(args.load,), daemon=True)]
    try:
        time.sleep(3.0)  # act creates the topics
        for t in threads:
            t.start()
        warm = rig.incident(-1, "warmup")
        latencies(rig, [warm], wait_s=120)  # act is up and assigned
        base = bare_round_trip(servers, Topics(prefix).name("audit"))
        steady = []
        for i in range(args.incidents):  # paced: one incident every 0.25 s
            steady.append(rig.incident(i, "steady"))
            time.sleep(0.25)
        steady_lat = latencies(rig, steady)
        rig.load_paused.set()
        broker.stop()
        time.sleep(args.outage)
        broker.start()
        back = time.time()
        rig.load_paused.clear()
        after = []
        for i in range(args.incidents // 2):  # at once: what the worker found meanwhile, then more
            after.append(rig.incident(i, "after"))
            time.sleep(0.25)
        after_lat = latencies(rig, after, wait_s=120)
        first_after = min((rig.first_command[i] for i in after if i in rig.first_command), default=float("nan"))
        after_base = bare_round_trip(servers, Topics(prefix).name("audit"), n=5)
        explain_missing(rig, [*steady, *after], Path(f"{tmp}/act-{prefix}/journal.sqlite"))
    finally:
        rig.stop.set()
        act.terminate()
        try:
            act.wait(timeout=60)
        except subprocess.TimeoutExpired:
            act.kill()
        for t in threads:
            t.join(timeout=5)
        rig.producer.close(timeout=5)
    return {"base": base, "steady": steady_lat, "after": after_lat, "first_after": first_after - back,
            "after_base": after_base, "load": os.getloadavg()[0]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_act")
    parser.add_argument("--incidents", type=int, default=40)
    parser.add_argument("--load", type=float, default=500.0, help="training records/s in the background")
    parser.add_argument("--outage", type=float, default=20.0, help="seconds the broker is down")
    parser.add_argument("--act-log", default="", help="write act's output (info level) here (.mirror/.journal)")
    parser.add_argument("--only", choices=["journal", "mirror"], help="measure one way only")
    args = parser.parse_args(list(argv or []))
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        settings = BrokerSettings(port=free_port(), controller_port=free_port(), data_dir=Path(tmp) / "kafka",
                                  heap_mb=256)
        broker = LocalBroker(settings, lib_dir=(ROOT / ".trainguard/kafka-lib").resolve())
        broker.start()
        try:  # the same broker, one after the other: the local journal only, then mirrored on act-state
            for name, mirror in (("journal only", False), ("journal + act-state", True)):
                if args.only and args.only != ("mirror" if mirror else "journal"):
                    continue
                results[name] = measure(broker, settings.servers, tmp, args, mirror=mirror)
        finally:
            broker.stop()
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"incident -> first command, act with {args.load:.0f} training records/s in the background")
    print(f"  uptime: {uptime}")
    for name, r in results.items():
        b50, b99 = pct(r["base"], 0.5), pct(r["base"], 0.99)
        print(f"{name} (load {r['load']:.2f} at its end)")
        print(f"  baseline bare Kafka round trip    p50 {b50 * 1e3:7.1f} ms  p99 {b99 * 1e3:7.1f} ms")
        print(f"  broker start() returned -> first command after the outage: {r['first_after']:5.2f} s "
              f"(bare round trip then: p50 {pct(r['after_base'], 0.5) * 1e3:.1f} ms)")
        for phase, lat in (("steady", r["steady"]), (f"after a {args.outage:.0f}s outage", r["after"])):
            if lat:
                p50, p99 = pct(lat, 0.5), pct(lat, 0.99)
                print(f"  {phase:32s} p50 {p50 * 1e3:7.1f} ms  p99 {p99 * 1e3:7.1f} ms  "
                      f"({p50 / b50:.1f}x / {p99 / b99:.1f}x baseline, n={len(lat)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
