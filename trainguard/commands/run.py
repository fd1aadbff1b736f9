"""`trainguard run -- CMD ...`: the on-node agent supervising a training command."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from schemas.actions import AGENT_VERBS
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
    from collectors.agent import Agent
    from collectors.command_feed import BackgroundFeed, KafkaCommandFeed
    from collectors.publisher import Publisher
    from collectors.topology import node_name
    from schemas.kafka_config import broker_environment, client_options
    from schemas.topics import Topics

    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not args.job or not argv:
        print("trainguard run: need --job (or $TRAINGUARD_JOB) and a command after --", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING if args.verbose else logging.CRITICAL)
    cs, agent_cfg = settings.collectors, settings.collectors.agent
    node = args.node or cs.node or node_name()
    # No default key: without its own key and act's public keys the agent refuses to start (exit 2).
    signer = settings.security.signer("node", node=node)
    command_keys = settings.security.required_ring("act")
    kafka = client_options(settings.broker, "kafka-python")
    os.environ.update(broker_environment(settings.broker))  # the training hook publishes to the same cluster
    topics = Topics(settings.topics.prefix)
    # In the background: the training must start at once even if Kafka is slow or down.
    threading.Thread(target=_ensure_topics, args=(settings, topics.all()), daemon=True).start()
    publisher = Publisher(servers=settings.broker.servers, topics=topics,
                          spool_dir=cs.spool_dir / f"agent-{args.job}-{node}",
                          spool_max_bytes=int(cs.spool_max_mb * 1024 * 1024), client_id=f"trainguard-agent-{node}",
                          sync=cs.spool_sync, signer=signer, client_options=kafka)
    feed = BackgroundFeed(KafkaCommandFeed(servers=settings.broker.servers, topic=topics.name("actions"),
                                           group_id=f"trainguard-agent-{args.job}-{node}", client_options=kafka))
    agent = Agent(job=args.job, node=node, argv=argv, sink=publisher,
                  command_keys=command_keys, max_clock_skew_s=settings.security.max_clock_skew_s,
                  state_dir=agent_cfg.state_dir, grace_s=agent_cfg.grace_s,
                  selfcheck_command=agent_cfg.selfcheck_command, selfcheck_timeout_s=agent_cfg.selfcheck_timeout_s,
                  stack_timeout_s=agent_cfg.stack_timeout_s, hang_suspect_s=agent_cfg.hang_suspect_s,
                  hang_stack_every_s=agent_cfg.hang_stack_every_s, tee=_tee,
                  env=dict(os.environ))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        return agent.serve(feed, linger_s=args.linger if args.linger is not None else agent_cfg.linger_s, stop=stop)
    finally:
        feed.close()
        publisher.close(timeout_s=10)


def _ensure_topics(settings: Settings, names: list[str]) -> None:
    """Create the topics if the broker is up; the agent must run the job even when it is not."""
    from kafka.errors import KafkaError

    from streams.admin import ensure_configured_topics

    try:
        ensure_configured_topics(settings, names)
    except KafkaError as exc:
        logging.getLogger(__name__).warning("could not create topics (%s); continuing", exc)


def _tee(line: str, stream: str) -> None:
    """Pass the training output through, each line to the stream it came from."""
    print(line, file=sys.stderr if stream == "stderr" else sys.stdout, flush=True)
