"""`trainguard record`: dump topics into a recording file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainguard.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from trainguard.schemas.topics import INPUT_TOPICS, TOPIC_RECORDS

    p = sub.add_parser("record", help="dump topics into a recording (JSON Lines)",
                       description="Read topics from the broker (from the beginning unless --from-end) and write "
                       "every record to a recording, one JSON line per event. Messages that do not decode go to "
                       "OUT.rejected.jsonl with their reason. Stops after --timeout seconds or --max-events events.")
    p.add_argument("--out", type=Path, required=True, metavar="FILE")
    p.add_argument("--topics", nargs="+", default=list(INPUT_TOPICS), choices=list(TOPIC_RECORDS),
                   metavar="TOPIC", help=f"logical topics (default: {' '.join(INPUT_TOPICS)})")
    p.add_argument("--timeout", type=float, metavar="S", help="stop after S seconds")
    p.add_argument("--max-events", type=int, metavar="N", help="stop after N events")
    p.add_argument("--from-end", action="store_true", help="record only events published from now on")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from trainguard.schemas.topics import Topics
    from trainguard.streams.admin import require_broker
    from trainguard.streams.recording import record

    if args.timeout is None and args.max_events is None:
        print("trainguard record: give --timeout S or --max-events N (or both)", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    require_broker(settings)
    try:
        stats = record(args.out, broker=settings.broker, topics=Topics(settings.topics.prefix),
                       logical=args.topics, timeout_s=args.timeout, max_events=args.max_events,
                       from_beginning=not args.from_end)
    except LookupError as exc:
        print(f"trainguard record: {exc}", file=sys.stderr)
        return 2
    print(f"recorded {stats.written} events to {args.out}"
          + (f"; {stats.rejected} undecodable messages in {args.out}.rejected.jsonl" if stats.rejected else ""))
    return 0
