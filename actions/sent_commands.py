"""What act sent, read back from its journal: whom a command addressed, what it asked, who did nothing.

Answers from nodes name a command id; act trusts an answer only from a node
that command addressed (`ActCore.trusts`), and frees the standby or
eviction budget only for nodes that certainly did not act. Both questions
are answered from the journal (the intent while in flight, the settled step
after), so a restarted act still knows. Pure over the journal.
"""

from __future__ import annotations

from trainguard.actions.journal import Journal
from trainguard.actions.selfcheck.fanout import machine_command_id
from trainguard.schemas.action_params import Replay
from trainguard.schemas.records import ActionCommand, ActionResult

NOTHING_DONE = ("rejected", "skipped")  # statuses that say a node (or the executor) did not act


def addressed(journal: Journal, command_id: str) -> frozenset[str] | None:
    """The nodes a command act sent was addressed to; None when act sent no such command.

    Read from the journal (the intent while in flight, the settled step after), so a
    restarted act still knows. A self-check's per-machine command addresses its machine.
    """
    parts = command_id.rsplit("-", 2)  # <decision>-<step>-<random>
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    decision_id, idx = parts[0], parts[1]
    sent = journal.intent(decision_id, int(idx))
    done = journal.step_result(decision_id, int(idx)) if sent is None else None
    if sent is not None:
        step_id, groups = sent.id, sent.params.groups if isinstance(sent.params, Replay) else []
        nodes = [*sent.nodes, *(str(m) for g in groups for m in g)]
    elif done is not None:
        step_id, nodes = done.command_id, [str(n) for n in done.details.get("addressed") or []]
        nodes += [str(m) for m in done.details.get("machines") or []]
    else:
        return None
    if command_id == step_id:
        return frozenset(nodes)
    return frozenset(m for m in nodes if machine_command_id(step_id, m) == command_id) or None


def sent_action(journal: Journal, command_id: str) -> str | None:
    """The action of the step a command id belongs to (the intent in flight, else the settled step).

    A real target must answer the command it got: its signed answer to a restart, labelled a
    self-check, must not count as a passing self-check. None when act knows no such step.
    """
    parts = command_id.rsplit("-", 2)  # <decision>-<step>-<random>
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    sent = journal.intent(parts[0], int(parts[1]))
    if sent is not None:
        return sent.action
    done = journal.step_result(parts[0], int(parts[1]))
    return None if done is None else done.action


def did_nothing(command: ActionCommand, result: ActionResult) -> list[str]:
    """The nodes of `command` that certainly did not act, judging by `result`.

    Agents' answers come per node (`per_node`); an executor that refused before
    sending anything answers once, "rejected", with no per-node word. A node
    missing from `per_node` never answered: it may still act, so it is not here.
    """
    per_node = result.details.get("per_node")
    if isinstance(per_node, dict) and per_node:
        return [n for n in command.nodes if per_node.get(n) in NOTHING_DONE]
    return list(command.nodes) if result.status in NOTHING_DONE else []
