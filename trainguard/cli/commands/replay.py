"""`trainguard replay`: publish a recording back to the broker, keeping the order per key."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainguard.settings import Settings


def speed(text: str) -> float | None:
    """`max` (as fast as possible) or a positive factor."""
    if text == "max":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--speed must be a positive number or 'max', not {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"--speed must be positive, not {text}")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("replay", help="publish a recording to the broker",
                       description="Publish every event of a recording to its topic (under the configured prefix) "
                       "with its recorded key, so each key keeps its order. --speed X replays event-time gaps X "
                       "times faster than they happened; --speed max sends as fast as possible.")
    p.add_argument("recording", type=Path, metavar="FILE")
    p.add_argument("--speed", type=speed, default=None, metavar="X|max", help="pacing (default: max)")
    p.add_argument("--skip-bad", action="store_true", help="skip (and count) invalid lines instead of stopping")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from trainguard.schemas.topics import Topics
    from trainguard.streams.admin import ensure_configured_topics, require_broker
    from trainguard.streams.recording import DeliveryError, RecordingError, replay

    if not args.recording.is_file():
        print(f"trainguard replay: recording {args.recording}: not found", file=sys.stderr)
        return 2
    topics = Topics(settings.topics.prefix)
    require_broker(settings)
    ensure_configured_topics(settings)

    def report(err: RecordingError) -> None:
        print(f"skipped {err}", file=sys.stderr)

    try:
        stats = replay(args.recording, broker=settings.broker, topics=topics, speed=args.speed,
                       on_error=report if args.skip_bad else None)
    except RecordingError as exc:
        print(f"trainguard replay: {exc} (nothing was sent; --skip-bad skips such lines)", file=sys.stderr)
        return 1
    except DeliveryError as exc:
        print(f"trainguard replay: {exc}", file=sys.stderr)
        return 2
    print(f"replayed {stats.sent} events from {args.recording}"
          + (f"; skipped {stats.skipped} bad lines" if stats.skipped else ""))
    return 0
