"""`trainguard keys generate`: make the Ed25519 keys commands, results, incidents and operator commands
are signed with; `trainguard keys acls`: the Kafka ACLs of each role's principal."""

from __future__ import annotations

import argparse
from pathlib import Path

from trainguard.cli.errors import UsageError
from trainguard.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("keys", help="generate the signing keys of act, the worker, the console and the node agents",
                       description="Write Ed25519 key pairs (<id>.key, mode 0600, and <id>.pub) and print the "
                       "security: section that uses them. act's private key stays with act; nodes get only "
                       "act's public key and their own node key; act gets the nodes', the worker's and the "
                       "console's public keys.")
    keys = p.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    gen = keys.add_parser("generate", help="generate key pairs")
    gen.add_argument("--dir", type=Path, required=True, help="directory to write the keys to")
    gen.add_argument("--node", action="append", default=[], metavar="NAME",
                     help="also make a key for this node (repeatable); written to DIR/nodes/NAME.key")
    gen.add_argument("--act-id", default="act", help="key id of act's key (a new id per rotation; default: act)")
    gen.add_argument("--no-act", action="store_true", help="make no act key (only node keys)")
    gen.add_argument("--worker", action="store_true", help="make the worker key (the default; kept for scripts)")
    gen.add_argument("--no-worker", action="store_true",
                     help="make no worker key (by default one is made: act acts only on incidents it signed)")
    gen.add_argument("--no-console", action="store_true",
                     help="make no console key (by default one is made: act applies only operator commands "
                     "the console signed)")
    gen.add_argument("--console-id", default="console",
                     help="key id of the console's key (a new id per rotation; default: console)")
    gen.add_argument("--keep-existing", action="store_true",
                     help="keep a key pair that already exists (both files) instead of refusing; a half pair "
                     "is still refused. Makes a one-shot (docker compose's keys service) safe to run again")
    gen.set_defaults(handler=run)
    acls = keys.add_parser("acls", help="print the recommended Kafka ACLs as kafka-acls.sh commands",
                           description="One principal per role (collector, agent, worker, act, console), each "
                           "allowed only what it does; only act may write the actions topic, only the console "
                           "the operator topic (docs/security.md).")
    acls.add_argument("--principal", action="append", default=[], metavar="ROLE=PRINCIPAL",
                      help="e.g. act=User:trainguard-act (default: User:trainguard-<role>)")
    acls.set_defaults(handler=print_acls)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from trainguard.schemas.signing import generate

    out = args.dir
    wanted = [(out, args.act_id)] * (not args.no_act) + [(out, "worker")] * (not args.no_worker)
    wanted += [(out, args.console_id)] * (not args.no_console) + [(out / "nodes", n) for n in args.node]
    for directory, key_id in wanted:
        if args.keep_existing and _pair_exists(directory, key_id):
            print(f"kept {directory / (key_id + '.key')} (exists)")
            continue
        for path in generate(directory, key_id):
            print(f"wrote {path}")
    print("\nsecurity:")
    if not args.no_act:
        print(f"  act_private_key: {out / (args.act_id + '.key')}   # act only")
        print(f"  act_public_keys: [{out / (args.act_id + '.pub')}]   # every node")
    if args.node:
        print(f"  node_private_key: {out / 'nodes' / '{node}.key'}   # each node: its own key only")
        print(f"  node_public_keys: [{out / 'nodes'}]   # act")
    if not args.no_worker:
        print(f"  worker_private_key: {out / 'worker.key'}   # the worker")
        print(f"  worker_public_keys: [{out / 'worker.pub'}]   # act: acts only on incidents the worker signed")
    if not args.no_console:
        print(f"  console_private_key: {out / (args.console_id + '.key')}   # the console only")
        print(f"  console_public_keys: [{out / (args.console_id + '.pub')}]   # act: applies only signed "
              "operator commands")
    return 0


def _pair_exists(directory: Path, key_id: str) -> bool:
    """Both files of a pair exist; a lone half is left for `generate` to refuse (never completed or replaced)."""
    return (directory / f"{key_id}.key").is_file() and (directory / f"{key_id}.pub").is_file()


def print_acls(args: argparse.Namespace, settings: Settings) -> int:
    from trainguard.cli.kafka_acls import ROLE_DOC, kafka_acls_command, recommended

    principals = {role: f"User:trainguard-{role}" for role in ROLE_DOC}
    for item in args.principal:
        role, sep, principal = item.partition("=")
        if not sep or role not in principals:
            raise UsageError(f"keys acls: --principal {item!r}: expected ROLE=PRINCIPAL, "
                             f"ROLE one of {', '.join(principals)}")
        principals[role] = principal
    grants = recommended(settings.topics.prefix, worker_group=settings.worker.app_id,
                         act_group=settings.actions.group_id)
    for role, doc in ROLE_DOC.items():
        print(f"# {role} ({principals[role]}): {doc}")
        for grant in (g for g in grants if g.role == role):
            print(kafka_acls_command(grant, principals[role], settings.broker.servers))
    return 0
