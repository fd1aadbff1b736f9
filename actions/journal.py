"""A durable local journal of decisions and plan steps (SQLite).

Idempotency lives here. An incident already journaled is never decided
again, so a redelivered incident yields no second action. Each plan step's
result is written before the next step starts, so an action consumer killed
mid-plan resumes at the first step without a result instead of evicting a
node twice. Offsets are committed to Kafka only after the decision is
journaled. Small key/value state (breaker, standby pool, approvals) lives
here too, so a tripped breaker still holds after a restart.

Every row is also an *item* (`actions.state_items`) with a version
(epoch, seq), kept in `versions`. Each committed transaction hands its
changed items to a listener (the Kafka mirror, `streams.act.state_mirror`),
in commit order, so the compacted `act-state` topic holds the same state
and a fresh machine can rebuild this file from it (`apply`).
"""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from trainguard.actions.state_items import Item
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import ActionCommand, ActionResult, Decision

_SCHEMA = """
CREATE TABLE IF NOT EXISTS decisions (
  id TEXT PRIMARY KEY, incident_id TEXT UNIQUE, job TEXT, ts REAL, status TEXT, body BLOB);
CREATE TABLE IF NOT EXISTS steps (
  decision_id TEXT, idx INTEGER, status TEXT, body BLOB, PRIMARY KEY (decision_id, idx));
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS intents (
  decision_id TEXT, idx INTEGER, body BLOB, PRIMARY KEY (decision_id, idx));
CREATE TABLE IF NOT EXISTS versions (key TEXT PRIMARY KEY, epoch INTEGER, seq INTEGER, deleted INTEGER);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER);
"""
Listener = Callable[[list[Item]], None]

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
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('epoch', 0)")
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('seq', 0)")
        self._codec = Codec()
        self._changed: list[tuple[str, bytes | None]] = []  # (item key, JSON value or None) in this transaction
        self._listener: Listener | None = None

    def listen(self, listener: Listener | None) -> None:
        """Hand every committed transaction's changed items to `listener`, in commit order."""
        self._listener = listener

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
                self._touch("decision/" + decision.id, self._codec.encode(decision))
                for key, value in (state or {}).items():
                    self._put(key, value)
        return cur.rowcount == 1

    @_locked
    def update_decision(self, decision: Decision) -> None:
        """Store a decision's new status (and body)."""
        with self._tx():
            body = self._codec.encode(decision)
            cur = self._db.execute("UPDATE decisions SET status=?, body=? WHERE id=?",
                                   (decision.status, body, decision.id))
            if cur.rowcount:
                self._touch("decision/" + decision.id, body)

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
    def since(self, ts: float, job: str = "") -> list[Decision]:
        """Every decision dated `ts` or later, oldest first, optionally for one job (the shadow report)."""
        sql = "SELECT body FROM decisions WHERE ts>=?" + (" AND job=?" if job else "") + " ORDER BY ts"
        args: tuple[Any, ...] = (ts, job) if job else (ts,)
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
            body = self._codec.encode(result)
            self._db.execute("INSERT OR REPLACE INTO steps VALUES (?,?,?,?)", (decision_id, idx, result.status, body))
            self._touch(f"step/{decision_id}/{idx}", body)
            if self._db.execute("DELETE FROM intents WHERE decision_id=? AND idx=?", (decision_id, idx)).rowcount:
                self._touch(f"intent/{decision_id}/{idx}", None)
            for key, value in (state or {}).items():
                self._put(key, value)

    @_locked
    def record_intent(self, decision_id: str, idx: int, command: ActionCommand,
                      state: dict[str, dict[str, Any]] | None = None) -> None:
        """Journal a signed command before it is sent, with the rails' reservation for it (`state`).

        A consumer killed after sending resumes by re-sending this very command
        (same id, so the agent de-duplicates) instead of asking the rails again,
        which would now refuse it (the node is in cooldown since the first send).
        The reservation goes in the same transaction: a restarted act still counts
        the nodes a command may have reached.
        """
        with self._tx():
            body = self._codec.encode(command)
            self._db.execute("INSERT OR REPLACE INTO intents VALUES (?,?,?)", (decision_id, idx, body))
            self._touch(f"intent/{decision_id}/{idx}", body)
            for key, value in (state or {}).items():
                self._put(key, value)

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
        """One SQLite transaction; its changed items get versions inside it and go to the listener after."""
        if self._db.in_transaction:  # nested: the outer transaction versions and hands on
            yield
            return
        self._db.execute("BEGIN IMMEDIATE")
        self._changed = []
        try:
            yield
            items = self._version(self._changed)
        except BaseException:
            self._db.execute("ROLLBACK")
            self._changed = []
            raise
        self._db.execute("COMMIT")
        self._changed = []
        if items and self._listener is not None:
            self._listener(items)

    def _touch(self, key: str, value: bytes | None) -> None:
        self._changed.append((key, value))

    def _put(self, key: str, value: dict[str, Any] | None) -> None:
        if value is None:
            if self._db.execute("DELETE FROM kv WHERE key=?", (key,)).rowcount:
                self._touch("state/" + key, None)
            return
        encoded = json.dumps(value)
        self._db.execute("INSERT OR REPLACE INTO kv VALUES (?,?)", (key, encoded))
        self._touch("state/" + key, encoded.encode())

    def _version(self, changed: list[tuple[str, bytes | None]]) -> list[Item]:
        """Give each changed item the next sequence number of this epoch (last change of a key wins)."""
        latest = dict(changed)
        if not latest:
            return []
        epoch = self._meta("epoch")
        seq = self._meta("seq")
        items = []
        for key, value in latest.items():
            seq += 1
            self._db.execute("INSERT OR REPLACE INTO versions VALUES (?,?,?,?)", (key, epoch, seq, value is None))
            items.append(Item(key, (epoch, seq), None if value is None else json.loads(value)))
        self._db.execute("UPDATE meta SET value=? WHERE name='seq'", (seq,))
        return items

    def _meta(self, name: str) -> int:
        return int(self._db.execute("SELECT value FROM meta WHERE name=?", (name,)).fetchone()[0])

    # ------------------------------------------------------------ items (the Kafka mirror's view)

    @_locked
    def version(self) -> tuple[int, int]:
        """The current (epoch, seq)."""
        return self._meta("epoch"), self._meta("seq")

    @_locked
    def begin_epoch(self, epoch: int, seq: int) -> None:
        """Continue as writer `epoch`, numbering changes above `seq` (after a reconcile)."""
        with self._tx():
            self._db.execute("UPDATE meta SET value=? WHERE name='epoch'", (epoch,))
            self._db.execute("UPDATE meta SET value=max(value, ?) WHERE name='seq'", (seq,))

    @_locked
    def items(self) -> dict[str, Item]:
        """Every item this journal holds (deleted ones as tombstones), with its version."""
        out: dict[str, Item] = {}
        for key, epoch, seq, deleted in self._db.execute("SELECT key, epoch, seq, deleted FROM versions"):
            out[key] = Item(key, (int(epoch), int(seq)), None if deleted else self._value(key))
        return out

    def _value(self, key: str) -> Any:
        kind, _, rest = key.partition("/")
        if kind == "state":
            row = self._db.execute("SELECT value FROM kv WHERE key=?", (rest,)).fetchone()
        elif kind == "decision":
            row = self._db.execute("SELECT body FROM decisions WHERE id=?", (rest,)).fetchone()
        else:
            decision_id, _, idx = rest.rpartition("/")
            table = "steps" if kind == "step" else "intents"
            row = self._db.execute(f"SELECT body FROM {table} WHERE decision_id=? AND idx=?",  # noqa: S608
                                   (decision_id, int(idx))).fetchone()
        return None if row is None else json.loads(row[0])

    @_locked
    def apply(self, items: list[Item]) -> None:
        """Write items another copy of the state holds (the topic), keeping their versions; no listener call."""
        listener, self._listener = self._listener, None
        try:
            with self._tx():
                for item in items:
                    self._apply(item)
                self._changed = []  # restored items are not changes to mirror
        finally:
            self._listener = listener

    def _apply(self, item: Item) -> None:
        kind, _, rest = item.key.partition("/")
        body = None if item.deleted else json.dumps(item.value)
        if kind == "state":
            if body is None:
                self._db.execute("DELETE FROM kv WHERE key=?", (rest,))
            else:
                self._db.execute("INSERT OR REPLACE INTO kv VALUES (?,?)", (rest, body))
        elif kind == "decision":
            self._db.execute("DELETE FROM decisions WHERE id=?", (rest,))
            if body is not None:
                d = self._codec.decode(body.encode(), Decision)
                self._db.execute("INSERT OR REPLACE INTO decisions VALUES (?,?,?,?,?,?)",  # incident ids are unique
                                 (d.id, d.incident_id, d.job, d.ts, d.status, body.encode()))
        elif kind in ("step", "intent"):
            decision_id, _, idx = rest.rpartition("/")
            table = "steps" if kind == "step" else "intents"
            self._db.execute(f"DELETE FROM {table} WHERE decision_id=? AND idx=?",  # noqa: S608
                             (decision_id, int(idx)))
            if body is not None and kind == "step":
                status = self._codec.decode(body.encode(), ActionResult).status
                self._db.execute("INSERT INTO steps VALUES (?,?,?,?)", (decision_id, int(idx), status, body.encode()))
            elif body is not None:
                self._db.execute("INSERT INTO intents VALUES (?,?,?)", (decision_id, int(idx), body.encode()))
        else:
            return  # a key this version does not know: left alone
        self._db.execute("INSERT OR REPLACE INTO versions VALUES (?,?,?,?)",
                         (item.key, item.version[0], item.version[1], item.deleted))

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
        with self._tx():
            self._put(key, value)

    @_locked
    def put_states(self, values: Mapping[str, dict[str, Any] | None]) -> None:
        """Store (None: delete) several state blobs in one transaction (one fsync, one mirrored batch)."""
        if values:
            with self._tx():
                for key, value in values.items():
                    self._put(key, value)

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
