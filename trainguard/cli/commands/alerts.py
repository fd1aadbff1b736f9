"""`trainguard alerts`: post incidents and decisions to Alertmanager and/or a Slack-style webhook."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from trainguard.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("alerts", help="route incidents and decisions to Alertmanager / Slack webhooks",
                       description="Follow the incidents and decisions topics (as their own consumer group) and post "
                       "each to an Alertmanager v2 alerts endpoint and/or a Slack-style incoming webhook, with the "
                       "decision's reason and plan, rate-limited per destination. The Slack URL is a secret: give "
                       "it in a file or in TRAINGUARD_ALERTS_SLACK_URL, never on the command line.")
    p.add_argument("--alertmanager", metavar="URL", default=os.environ.get("TRAINGUARD_ALERTS_ALERTMANAGER_URL", ""),
                   help="e.g. http://alertmanager.monitoring:9093/api/v2/alerts")
    p.add_argument("--slack-url-file", type=Path, metavar="FILE", help="file holding the incoming-webhook URL")
    p.add_argument("--per-minute", type=float, default=6.0, help="average posts per minute per destination "
                   "(default: %(default)s)")
    p.add_argument("--burst", type=int, default=3, help="posts allowed at once (default: %(default)s)")
    p.add_argument("--group-id", default="trainguard-alerts", help="consumer group (default: %(default)s)")
    p.add_argument("--from-beginning", action="store_true", help="start at the oldest record, not the newest")
    p.add_argument("--max-records", type=int, help="exit after routing this many records")
    p.add_argument("--timeout", type=float, help="exit after this many seconds")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from trainguard.schemas.topics import Topics
    from trainguard.streams.alerts.router import AlertRouter

    slack = os.environ.get("TRAINGUARD_ALERTS_SLACK_URL", "")
    if args.slack_url_file:
        try:
            slack = args.slack_url_file.read_text().strip()
        except OSError as exc:
            print(f"trainguard alerts: --slack-url-file {args.slack_url_file}: {exc.strerror}", file=sys.stderr)
            return 2
    if not (args.alertmanager or slack):
        print("trainguard alerts: give --alertmanager URL and/or --slack-url-file FILE", file=sys.stderr)
        return 2
    if args.per_minute <= 0 or args.burst < 1:
        print("trainguard alerts: --per-minute must be > 0 and --burst >= 1", file=sys.stderr)
        return 2
    router = AlertRouter.build(alertmanager_url=args.alertmanager, slack_url=slack, per_minute=args.per_minute,
                               burst=args.burst)
    print(f"alerts: to {', '.join(s.name for s in router.sinks)}, following {settings.broker.servers}", flush=True)
    routed = router.run(settings.broker, Topics(settings.topics.prefix), group_id=args.group_id,
                        from_beginning=args.from_beginning, max_records=args.max_records, timeout_s=args.timeout)
    print(f"alerts: routed {routed} records, {router.sent} posts, {router.failed} failed")
    return 0
