"""`trainguard schemas export DIR`: JSON Schema files for other producers."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from trainguard.schemas.codec import json_schemas
from trainguard.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("schemas", help="export the event schemas",
                       description="Export one JSON Schema file per record type, for producers in other languages.")
    actions = p.add_subparsers(dest="schemas_action", metavar="ACTION", required=True)
    export = actions.add_parser("export", help="write <type>.schema.json files into DIR")
    export.add_argument("dir", type=Path, metavar="DIR")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    args.dir.mkdir(parents=True, exist_ok=True)
    for tag, schema in json_schemas().items():
        (args.dir / f"{tag}.schema.json").write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
    print(f"wrote {len(json_schemas())} schemas to {args.dir}")
    return 0
