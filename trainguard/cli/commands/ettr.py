"""`trainguard ettr --job J`: productive time against wall-clock, and where the rest went."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

from rich.console import Console
from rich.table import Table

from trainguard.cli.errors import UsageError
from trainguard.schemas.records import Record
from trainguard.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("ettr", help="a job's effective training time ratio and unproductive-time breakdown",
                       description="Account a job's wall-clock time from its steps, incidents and action results: "
                       "productive time, and unproductive time split into detection, localisation, failover and "
                       "re-computation. Reads a recording file (--recording), or the topics from the beginning "
                       "(the default when no recording is given).")
    p.add_argument("--job", required=True, help="the job to account")
    p.add_argument("--recording", type=Path, action="append", default=[], metavar="FILE",
                   help="a recording (JSON Lines, see `trainguard record`); may repeat")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from trainguard.actions.ettr import EttrAccount

    account = EttrAccount()
    jobs: set[str] = set()
    for record in _records(args, settings):
        account.observe(record)
        jobs.add(str(getattr(record, "job", "")))
    if args.job not in jobs:
        where = ", ".join(str(p) for p in args.recording) if args.recording else "the topics"
        known = ", ".join(sorted(j for j in jobs if j)[:10]) or "none"
        raise UsageError(f"ettr: no records of job {args.job!r} in {where} (jobs seen: {known})")
    report = account.report(args.job)
    if args.json:
        print(json.dumps(report.as_dict()))
        return 0
    table = Table(title=f"ETTR of job {args.job}: {report.ettr:.1%} over {report.wall_s:.1f}s, "
                        f"{report.incidents} incident(s)")
    table.add_column("time")
    table.add_column("seconds", justify="right")
    table.add_column("share", justify="right")
    rows = [("productive", report.productive_s), *report.unproductive_s.items()]
    for name, seconds in rows:
        share = seconds / report.wall_s if report.wall_s else 0.0
        table.add_row(name, f"{seconds:.1f}", f"{share:.1%}")
    Console().print(table)
    return 0


def _records(args: argparse.Namespace, settings: Settings) -> Iterator[Record]:
    if args.recording:
        from trainguard.streams.recording import read_recording

        for path in args.recording:
            if not Path(path).is_file():
                raise UsageError(f"ettr: recording {path}: not found")
            for event in read_recording(path):
                yield event.value
        return
    yield from _from_topics(settings)


def _from_topics(settings: Settings) -> Iterator[Record]:
    """Every record of the accounted topics, from the beginning to their current end."""
    from kafka import TopicPartition

    from trainguard.streams.admin import require_broker

    require_broker(settings)

    from trainguard.schemas.codec import Codec, DecodeError
    from trainguard.schemas.topics import Topics
    from trainguard.streams import kafka_io

    topics, codec = Topics(settings.topics.prefix), Codec()
    consumer = kafka_io.consumer(settings.broker)
    try:
        parts = [TopicPartition(t, p) for t in (topics.name(n) for n in ("training", "incidents", "action-results"))
                 for p in sorted(consumer.partitions_for_topic(t) or [])]
        for msg in kafka_io.read_to_end(consumer, parts):
            try:
                yield codec.decode(msg.value)
            except DecodeError:
                continue
    finally:
        consumer.close()
