"""The recommended Kafka principals and ACLs: who may read and write which trainguard topic.

One principal per role, each allowed only what its code does. This is what
keeps a compromised training pod (which holds the collector credentials its
hook needs) from writing commands or incidents: only `act` may write
`<prefix>actions`, only the worker `<prefix>incidents`, only the console
`<prefix>operator` (act also verifies the console's signature there, so a
principal that slips through still cannot forge an operator). The integration test
creates exactly these ACLs on a broker with KRaft's StandardAuthorizer and
checks them; `trainguard keys acls` prints them as `kafka-acls` commands.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trainguard.schemas.topics import INPUT_TOPICS

Operation = Literal["READ", "WRITE", "DESCRIBE"]


@dataclass(frozen=True)
class Grant:
    """Allow `principal` to `operation` the topic or group `name` (a prefix if `prefixed`)."""

    role: str
    operation: Operation
    resource: Literal["TOPIC", "GROUP", "TRANSACTIONAL_ID"]
    name: str
    prefixed: bool = False


ROLE_DOC = {
    "collector": "node collectors (`trainguard collect`) and the training hook: telemetry only",
    "agent": "`trainguard run` on each node: reads commands, writes results, logs, stacks and audit",
    "worker": "`trainguard worker`: reads telemetry, writes anomalies, incidents, dead letters",
    "act": "`trainguard act`: reads incidents, results and operator commands, writes decisions, commands "
           "and audit; alone reads and writes its state topic (act-state), transactionally",
    "console": "`trainguard ui`: reads what act reads and writes (never act-state), writes operator commands "
               "(signed) and its audit entries",
    "alerts": "`trainguard alerts`: reads incidents and decisions with its own group",
}
CONSOLE_READS = ("incidents", "decisions", "actions", "action-results", "audit", "operator", "anomalies", "training",
                 "checkpoints", "gpu")  # streams.console.feed.READ


def recommended(prefix: str = "tg.", worker_group: str = "trainguard-worker",
                act_group: str = "trainguard-actions") -> list[Grant]:
    """The grants of every role for topics under `prefix`."""
    topics = [f"{prefix}{t}" for t in INPUT_TOPICS]
    grants = [Grant("collector", "WRITE", "TOPIC", t) for t in topics]
    grants += [Grant("agent", "READ", "TOPIC", f"{prefix}actions"),
               Grant("agent", "READ", "GROUP", "trainguard-agent-", prefixed=True)]
    grants += [Grant("agent", "WRITE", "TOPIC", f"{prefix}{t}")
               for t in ("action-results", "audit", "logs", "training")]
    grants += [Grant("worker", "READ", "TOPIC", t) for t in topics]
    grants += [Grant("worker", "READ", "GROUP", worker_group, prefixed=True)]
    grants += [Grant("worker", "WRITE", "TOPIC", f"{prefix}{t}") for t in ("anomalies", "incidents", "dead-letter")]
    grants += [Grant("act", "READ", "TOPIC", f"{prefix}{t}")
               for t in ("incidents", "action-results", "checkpoints", "training", "operator")]
    grants += [Grant("act", "READ", "GROUP", act_group)]
    grants += [Grant("act", "WRITE", "TOPIC", f"{prefix}{t}") for t in ("actions", "decisions", "audit")]
    # act's durable state: no other role may read it (it holds signed commands) or write it.
    grants += [Grant("act", op, "TOPIC", f"{prefix}act-state") for op in ("READ", "WRITE")]
    grants += [Grant("act", op, "TRANSACTIONAL_ID", f"{act_group}.state") for op in ("WRITE", "DESCRIBE")]
    grants += [Grant("console", "READ", "TOPIC", f"{prefix}{t}") for t in CONSOLE_READS]
    grants += [Grant("console", "WRITE", "TOPIC", f"{prefix}{t}") for t in ("operator", "audit")]
    grants += [Grant("alerts", "READ", "TOPIC", f"{prefix}{t}") for t in ("incidents", "decisions")]
    grants += [Grant("alerts", "READ", "GROUP", "trainguard-alerts", prefixed=True)]
    return grants


def kafka_acls_command(grant: Grant, principal: str, bootstrap: str = "$BOOTSTRAP") -> str:
    """The `kafka-acls.sh` line that creates `grant` for `principal` (e.g. User:trainguard-act)."""
    kind = {"TOPIC": "--topic", "GROUP": "--group", "TRANSACTIONAL_ID": "--transactional-id"}[grant.resource]
    pattern = " --resource-pattern-type prefixed" if grant.prefixed else ""
    return (f"kafka-acls.sh --bootstrap-server {bootstrap} --command-config admin.properties --add "
            f"--allow-principal {principal} --operation {grant.operation.title()} {kind} {grant.name}{pattern}")
