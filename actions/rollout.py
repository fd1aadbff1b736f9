"""Rollout modes: how far trainguard may go on its own, per incident kind and per rule.

No team hands node evictions to a new tool on day one. Each decision is
taken in one of three modes:

* `observe`: decide and journal (status "observed") what would have been
  done, and whether the breaker would have blocked it; send nothing;
* `approve`: hold the plan for an operator (the approval path);
* `auto`: act.

The mode of a decision is the most specific one configured: the rule's,
else the kind's, else the default (`actions.rollout`); a kind listed in
`actions.approval_kinds` never goes further than `approve`. Operators change
modes at run time with a signed `set_rollout` command; the changes are
journaled (act's state topic), so a restarted act keeps a promoted kind.
Pure: no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

from trainguard.actions.safety import CircuitBreaker, Cooldown, needs_approval
from trainguard.schemas.actions import REMOVES_NODE
from trainguard.schemas.kinds import ANOMALY_KINDS
from trainguard.schemas.records import Decision

Mode = Literal["observe", "approve", "auto"]
MODES: tuple[str, ...] = get_args(Mode)
ROLLOUT_KINDS = tuple(k for k in ANOMALY_KINDS if k != "clock_skew")  # the kinds act decides on
SCOPES = ("default", "kind", "rule")


def check_mode(mode: str) -> Mode:
    """`mode` if it is one; ValueError naming the choices otherwise (settings and commands)."""
    if mode not in MODES:
        raise ValueError(f"unknown rollout mode {mode!r} (one of: {', '.join(MODES)})")
    return cast(Mode, mode)


@dataclass
class RolloutPolicy:
    """The modes in force: a default, then per-kind and per-rule overrides (most specific wins)."""

    default: Mode = "observe"
    kinds: dict[str, Mode] = field(default_factory=dict)
    rules: dict[str, Mode] = field(default_factory=dict)

    @classmethod
    def acting(cls) -> RolloutPolicy:
        """Everything in `auto`: a runner built without settings (the library, the backtest) acts."""
        return cls(default="auto")

    def mode_for(self, kind: str, rule: str, approval_kinds: list[str] | None = None) -> Mode:
        """The mode a decision of `kind` by `rule` is taken in."""
        mode = self.rules.get(rule) or self.kinds.get(kind) or self.default
        if mode == "auto" and needs_approval(kind, approval_kinds or []):
            return "approve"  # approval_kinds is the older, coarser form of `approve`: it still holds
        return mode

    def changed(self, scope: str, name: str, mode: Mode) -> RolloutPolicy:
        """A copy with `scope` ("default", "kind" or "rule") `name` set to `mode`."""
        kinds, rules = dict(self.kinds), dict(self.rules)
        if scope == "default":
            return RolloutPolicy(mode, kinds, rules)
        (kinds if scope == "kind" else rules)[name] = mode
        return RolloutPolicy(self.default, kinds, rules)

    def snapshot(self) -> dict[str, Any]:
        """Plain data for the journal and the console."""
        return {"default": self.default, "kinds": dict(self.kinds), "rules": dict(self.rules)}

    @classmethod
    def restore(cls, state: dict[str, Any], base: RolloutPolicy) -> RolloutPolicy:
        """`base` (the settings) with the journaled operator changes applied over it."""
        if not state:
            return base
        return cls(default=check_mode(str(state.get("default", base.default))),
                   kinds={**base.kinds, **{str(k): check_mode(str(v)) for k, v in state.get("kinds", {}).items()}},
                   rules={**base.rules, **{str(k): check_mode(str(v)) for k, v in state.get("rules", {}).items()}})

    def modes_by_kind(self, kinds: list[str]) -> dict[str, str]:
        """The mode of each of `kinds` (rule overrides aside), for the metrics."""
        return {k: self.kinds.get(k, self.default) for k in kinds}


def parse_subject(subject: str) -> tuple[str, str]:
    """("kind", "hw_fault") from "kind:hw_fault", ("default", "") from "default"; ValueError otherwise."""
    scope, _, name = subject.partition(":")
    if scope == "default" and not name:
        return scope, ""
    if scope in ("kind", "rule") and name:
        return scope, name
    raise ValueError(f"rollout subject {subject!r} is not 'default', 'kind:<kind>' or 'rule:<rule>'")


def apply_change(policy: RolloutPolicy, subject: str, mode: str) -> tuple[RolloutPolicy | None, str]:
    """The policy after setting `subject` to `mode`, and what to audit; (None, why) when refused."""
    try:
        scope, name = parse_subject(subject)
        new_mode = check_mode(mode)
    except ValueError as exc:
        return None, f"refused: {exc}"
    was: str
    if scope == "default":
        was = policy.default
    else:
        own = (policy.kinds if scope == "kind" else policy.rules).get(name)
        was = own or ("its kind's mode" if scope == "rule" else f"{policy.default} (the default)")
    label = "default" if scope == "default" else f"{scope} {name}"
    return policy.changed(scope, name, new_mode), f"rollout of {label}: {was} -> {new_mode}"


def overridden(overrides: dict[str, Any], subject: str, mode: str) -> dict[str, Any]:
    """The journaled operator overrides with `subject` set to `mode` (both already checked); a copy."""
    scope, name = parse_subject(subject)
    out: dict[str, Any] = {"kinds": dict(overrides.get("kinds", {})), "rules": dict(overrides.get("rules", {}))}
    if "default" in overrides:
        out["default"] = overrides["default"]
    if scope == "default":
        out["default"] = mode
    else:
        out["kinds" if scope == "kind" else "rules"][name] = mode
    return out


def evictions_of(decision: Decision) -> list[str]:
    """The nodes the plan names for steps that take a node out (those it names only at run time aside)."""
    return list(dict.fromkeys(n for s in decision.plan if s.action in REMOVES_NODE for n in s.nodes))


def would_block(decision: Decision, *, real: CircuitBreaker, shadow: CircuitBreaker, cooldown: Cooldown,
                job_size: int, now: float) -> str:
    """Why the rails would have refused an observed plan's evictions ("" if they would have passed).

    `shadow` counts the evictions observed decisions would have made, so a burst
    of observed hw_faults trips it as it would have tripped the real one; a trip
    is recorded on the decision and then lifted (an observed trip holds no one,
    and every later decision is judged on its own). The real breaker's trip and
    the real cooldown count too: they hold whatever mode a decision is in.
    """
    nodes = evictions_of(decision)
    if not nodes:
        return ""
    if real.tripped:
        return f"circuit breaker tripped: {real.trip_reason}"
    verdict = cooldown.check(nodes, ts=now)
    if verdict.allowed:
        verdict = shadow.reserve(job=decision.job, nodes=nodes, job_size=job_size, now=now, tag=decision.id)
    shadow.tripped, shadow.trip_reason = False, ""
    return verdict.reason
