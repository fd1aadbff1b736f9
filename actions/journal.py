"""A durable local journal of decisions and plan steps (SQLite).

Idempotency lives here. An incident already journaled is never decided
again, so a redelivered incident yields no second action. Each plan step's
result is written before the next step starts, so an action consumer killed
mid-plan resumes at the first step without a result instead of evicting a
node twice. Offsets are committed to Kafka only after the decision is
journaled. Small key/value state (breaker, standby pool, approvals) lives
here too, so a tripped breaker still holds after a restart.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from schemas.codec import Codec
from schemas.records import ActionCommand, ActionResult, Decision

_SCHEMA = """
CREATE TABLE IF NOT EXISTS decisions (
  id TEXT PRIMARY KEY, incident_id TEXT UNIQUE, job TEXT, ts REAL, status TEXT, body BLOB);
CREATE TABLE IF NOT EXISTS steps (
  decision_id TEXT, idx INTEGER, status TEXT, body BLOB, PRIMARY KEY (decision_id, idx));
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS intents (
  decision_id TEXT, idx INTEGER, body BLOB, PRIMARY KEY (decision_id, idx));
"""

FINAL = ("executed", "failed", "blocked")
T = TypeVar("T")


def _locked(method: Callable[..., T]) -> Callable[..., T]:
    """Serialise a journal method: plan threads and the app's event loop share one connection,
    and a transaction must never take in another thread's statement."""

    @functools.wraps(method)
    def wrapper(self: Journal, *args: Any, **kwargs: Any) -> T:
        with self._lock:
            return method(self, *args, **kwargs)

    return wrapper


class Journal:
    """Decisions, step results and small state, one SQLite file.

    >>> j = Journal(":memory:")
    >>> j.decision_for("inc-1") is None
    True
    """

    def __init__(self, path: Path | str) -> None:
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        # FULL: a committed row survives a power cut, not only a killed process. Writes are
        # per decision, step and checkpoint/topology announcement, so the fsync is affordable.
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        self._codec = Codec()

    @_locked
    def close(self) -> None:
        """Close the database."""
        self._db.close()

    @_locked
    def decision_for(self, incident_id: str) -> Decision | None:
        """The decision already taken for an incident, if any."""
        row = self._db.execute("SELECT body FROM decisions WHERE incident_id=?", (incident_id,)).fetchone()
        return None if row is None else self._codec.decode(row[0], Decision)

    @_locked
    def record_decision(self, decision: Decision, state: dict[str, dict[str, Any]] | None = None) -> bool:
        """Journal a new decision (and the engine memory it changed, atomically).

        False if its incident was already decided; then `state` is not written either,
        so a redelivered incident cannot count twice in the engine's memory.
        """
        with self._tx():
            cur = self._db.execute(
                "INSERT OR IGNORE INTO decisions VALUES (?,?,?,?,?,?)",
                (decision.id, decision.incident_id, decision.job, decision.ts, decision.status,
                 self._codec.encode(decision)),
            )
            if cur.rowcount == 1:
                for key, value in (state or {}).items():
                    self._db.execute("INSERT OR REPLACE INTO kv VALUES (?,?)", (key, json.dumps(value)))
        return cur.rowcount == 1

    @_locked
    def update_decision(self, decision: Decision) -> None:
        """Store a decision's new status (and body)."""
        self._db.execute("UPDATE decisions SET status=?, body=? WHERE id=?",
                         (decision.status, self._codec.encode(decision), decision.id))

    @_locked
    def get(self, decision_id: str) -> Decision | None:
        """One decision by id."""
        row = self._db.execute("SELECT body FROM decisions WHERE id=?", (decision_id,)).fetchone()
        return None if row is None else self._codec.decode(row[0], Decision)

    @_locked
    def unfinished(self) -> list[Decision]:
        """Decisions whose plan has not run to the end (to resume)."""
        rows = self._db.execute("SELECT body FROM decisions WHERE status='planned' ORDER BY ts").fetchall()
        decisions = [self._codec.decode(r[0], Decision) for r in rows]
        return [d for d in decisions if not d.dry_run]

    @_locked
    def recent(self, limit: int = 20, job: str = "") -> list[Decision]:
        """The newest decisions first, optionally for one job."""
        sql = "SELECT body FROM decisions" + (" WHERE job=?" if job else "") + " ORDER BY ts DESC LIMIT ?"
        args: tuple[Any, ...] = (job, limit) if job else (limit,)
        return [self._codec.decode(r[0], Decision) for r in self._db.execute(sql, args).fetchall()]

    @_locked
    def step_result(self, decision_id: str, idx: int) -> ActionResult | None:
        """The journaled result of one plan step, if it completed."""
        row = self._db.execute("SELECT body FROM steps WHERE decision_id=? AND idx=?", (decision_id, idx)).fetchone()
        return None if row is None else self._codec.decode(row[0], ActionResult)

    @_locked
    def record_step(self, decision_id: str, idx: int, result: ActionResult,
                    state: dict[str, dict[str, Any]] | None = None) -> None:
        """Journal one step's result, and the state it changed, in one transaction.

        A step's effects (the node is evicted, the breaker counted it, a spare was
        taken) and its "done" mark must never be durable one without the other: a
        crash between them would repeat the step or forget its effects.
        """
        with self._tx():
            self._db.execute("INSERT OR REPLACE INTO steps VALUES (?,?,?,?)",
                             (decision_id, idx, result.status, self._codec.encode(result)))
            self._db.execute("DELETE FROM intents WHERE decision_id=? AND idx=?", (decision_id, idx))
            for key, value in (state or {}).items():
                self._db.execute("INSERT OR REPLACE INTO kv VALUES (?,?)", (key, json.dumps(value)))

    @_locked
    def record_intent(self, decision_id: str, idx: int, command: ActionCommand) -> None:
        """Journal a signed command before it is sent: its rails were passed.

        A consumer killed after sending resumes by re-sending this very command
        (same id, so the agent de-duplicates) instead of asking the rails again,
        which would now refuse it (the node is in cooldown since the first send).
        """
        self._db.execute("INSERT OR REPLACE INTO intents VALUES (?,?,?)",
                         (decision_id, idx, self._codec.encode(command)))

    @_locked
    def intent(self, decision_id: str, idx: int) -> ActionCommand | None:
        """The command a step sent but whose result was never journaled."""
        row = self._db.execute("SELECT body FROM intents WHERE decision_id=? AND idx=?",
                               (decision_id, idx)).fetchone()
        return None if row is None else self._codec.decode(row[0], ActionCommand)

    @_locked
    def states(self, prefix: str) -> dict[str, dict[str, Any]]:
        """Every state blob whose key starts with `prefix`, by the rest of its key."""
        rows = self._db.execute("SELECT key, value FROM kv WHERE key >= ? AND key < ?", (prefix, prefix + "\uffff"))
        return {k[len(prefix):]: dict(json.loads(v)) for k, v in rows.fetchall()}

    @contextmanager
    def _tx(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    @_locked
    def steps(self, decision_id: str) -> list[ActionResult]:
        """Every journaled step result of a decision, in plan order."""
        rows = self._db.execute("SELECT body FROM steps WHERE decision_id=? ORDER BY idx", (decision_id,))
        return [self._codec.decode(r[0], ActionResult) for r in rows.fetchall()]

    @_locked
    def get_state(self, key: str) -> dict[str, Any]:
        """A small JSON state blob (empty dict if absent)."""
        row = self._db.execute("SELECT value FROM kv WHERE key=?", (key,)).fetchone()
        return {} if row is None else dict(json.loads(row[0]))

    @_locked
    def put_state(self, key: str, value: dict[str, Any]) -> None:
        """Store a small JSON state blob."""
        self._db.execute("INSERT OR REPLACE INTO kv VALUES (?,?)", (key, json.dumps(value)))

    @_locked
    def request_breaker_reset(self) -> int:
        """Leave an operator's reset request for the running consumer; return its number."""
        state = self.get_state("operator")
        state["breaker_resets"] = int(state.get("breaker_resets", 0)) + 1
        self.put_state("operator", state)
        return int(state["breaker_resets"])

    @_locked
    def request_node_return(self, node: str) -> None:
        """Queue a repaired node (its self-check passed) for the standby pool."""
        state = self.get_state("operator")
        state["returns"] = sorted({*state.get("returns", []), node})
        self.put_state("operator", state)

    @_locked
    def take_node_returns(self) -> list[str]:
        """The queued node returns, emptying the queue."""
        state = self.get_state("operator")
        returns = [str(n) for n in state.pop("returns", [])]
        if returns:
            self.put_state("operator", state)
        return returns
