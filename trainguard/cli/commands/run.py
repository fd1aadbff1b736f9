"""`trainguard run -- CMD ...`: the on-node agent supervising a training command."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from trainguard.schemas.actions import AGENT_VERBS
from trainguard.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", help="supervise a training command on this node (the on-node agent)",
                       description="Start CMD, tee and parse its output into log events, publish its exit code, "
                       "and carry out signed process-level commands for this job/node from the actions topic "
                       f"({', '.join(sorted(AGENT_VERBS))}), publishing an action result for each, "
                       "signed with this node's key (security.node_private_key); commands must verify with "
                       "security.act_public_keys. Executed command ids are kept in collectors.agent.state_dir, "
                       "so a replayed command never runs twice.",
                       usage="trainguard run [--job JOB] [--node NODE] -- CMD [ARG ...]")
    p.add_argument("--job", default=os.environ.get("TRAINGUARD_JOB", ""),
                   help="job name (default: $TRAINGUARD_JOB)")
    p.add_argument("--node", help="node name (default: collectors.node, else NODE_NAME, else the hostname)")
    p.add_argument("--linger", type=float, help="seconds to wait for a restart command after the training "
                   "process failed or was stopped (default: collectors.agent.linger_s)")
    p.add_argument("-v", "--verbose", action="store_true", help="log the agent's own actions")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="CMD", help="the training command, after --")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from trainguard.collectors.agent.node_agent import Agent
    from trainguard.schemas.kafka_config import broker_environment
    from trainguard.schemas.topics import Topics
    from trainguard.topology import node_name

    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not args.job or not argv:
        print("trainguard run: need --job (or $TRAINGUARD_JOB) and a command after --", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING if args.verbose else logging.CRITICAL)
    # Commands are rare and move nodes: every one the agent receives and answers is logged even
    # without --verbose, so "act got no answer" can be told from "the agent never saw it".
    logging.getLogger("trainguard.collectors.agent.node_agent").setLevel(logging.INFO)
    node = args.node or settings.collectors.node or node_name()
    # Keys first (no default key: the agent refuses to start, exit 2), then the environment the
    # training inherits: its hook publishes to the same cluster.
    settings.security.signer("node", node=node)
    settings.security.required_ring("act")
    os.environ.update(broker_environment(settings.broker))
    # In the background: the training must start at once even if Kafka is slow or down.
    threading.Thread(target=_ensure_topics, args=(settings, Topics(settings.topics.prefix).all()),
                     daemon=True).start()
    agent = Agent.from_settings(settings, job=args.job, node=node, argv=argv, tee=_tee, env=dict(os.environ))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    linger_s = args.linger if args.linger is not None else settings.collectors.agent.linger_s
    try:
        return agent.serve(linger_s=linger_s, stop=stop)
    finally:
        agent.close()


def _ensure_topics(settings: Settings, names: list[str]) -> None:
    """Create the topics if the broker is up; the agent must run the job even when it is not."""
    from kafka.errors import KafkaError

    from trainguard.streams.admin import ensure_configured_topics

    try:
        ensure_configured_topics(settings, names)
    except KafkaError as exc:
        logging.getLogger(__name__).warning("could not create topics (%s); continuing", exc)


def _tee(line: str, stream: str) -> None:
    """Pass the training output through, each line to the stream it came from."""
    print(line, file=sys.stderr if stream == "stderr" else sys.stdout, flush=True)
