"""What `act` knows about each job, kept durable in the journal.

A decision needs the job's checkpoints (what to restore), its topology (whom
a restart addresses, which group to over-evict) and the engine's memory of
earlier incidents (a second NaN at the same step is corruption; a second
unknown fault escalates). All of it used to live only in memory while the
offsets of the records it came from were committed, so a restarted `act`
restarted jobs from scratch and addressed restarts to no one.

Here every change is written through to the journal *as it is observed*:
the consumer commits a record's offset only after `observe` returned, so
nothing committed is ever forgotten, and `load` rebuilds the same state.
Writes happen only when something changed (a topology is re-announced often).
ETTR accounting changes with every step, so it is journaled once per
consumed batch (`save_ettr`, called before the batch's offsets are committed),
and incrementally: a job's steps go in chunks of `STEP_CHUNK` written once
each, and only the last, partial chunk is rewritten with the job's summary,
so a batch costs O(batch), not O(the job's history).
"""

from __future__ import annotations

from typing import Any

import msgspec

from trainguard.actions.checkpoints import CheckpointRegistry
from trainguard.actions.engine import DecisionEngine
from trainguard.actions.ettr import EttrAccount
from trainguard.actions.journal import Journal
from trainguard.actions.restore import JOURNALED
from trainguard.schemas.bounded import Bounded
from trainguard.schemas.names import bad_name
from trainguard.schemas.records import CheckpointEvent, JobTopology

_CKPT = "ckpt:"
_TOPO = "topology:"
_ENGINE = "engine"
_ETTR = "ettr:"
_ETTR_STEPS = "ettr-steps:"  # <job>:<chunk number>
STEP_CHUNK = 1024


class JobKnowledge:
    """Write-through store of checkpoints, topologies and the engine's memory."""

    def __init__(self, journal: Journal, engine: DecisionEngine, checkpoints: CheckpointRegistry,
                 ettr: EttrAccount | None = None) -> None:
        self.journal = journal
        self.engine = engine
        self.checkpoints = checkpoints
        self.ettr = ettr if ettr is not None else EttrAccount()
        self._topo_seen: dict[str, bytes] = {}  # job -> last stored encoding (skip identical re-announcements)
        self._chunks: Bounded[str, tuple[int, int]] = Bounded(engine.topologies.cap)  # job -> [lo, hi) chunks

    def load(self) -> None:
        """Rebuild everything a previous run knew (call once, before consuming)."""
        for job, state in self.journal.states(_CKPT).items():
            self.checkpoints.restore(job, state)
        for job, state in self.journal.states(_TOPO).items():
            record = msgspec.convert(state, JobTopology, strict=False)
            if bad_name(record) is not None:
                continue  # only a forged journal entry holds such a name: act stored validated records
            self.engine.observe_topology(record)
            self._topo_seen[job] = msgspec.json.encode(state)
        self.engine.restore(self.journal.get_state(_ENGINE))
        for job, state in self.journal.states(_ETTR).items():
            lo, hi = int(state.get("trimmed", 0)) // STEP_CHUNK, int(state.get("steps_from", 0)) // STEP_CHUNK
            earlier = [s for c in range(lo, hi)
                       for s in self.journal.get_state(f"{_ETTR_STEPS}{job}:{c}").get("steps", [])]
            self.ettr.restore(job, state, earlier[int(state.get("trimmed", 0)) - lo * STEP_CHUNK:])
            self._chunks[job] = (lo, hi)

    def save_ettr(self) -> None:
        """Journal the ETTR account of every job changed since the last call (one transaction)."""
        values: dict[str, dict[str, Any] | None] = {}
        for job in self.ettr.take_dirty():
            trimmed, total = self.ettr.steps_seen(job)
            lo, hi = self._chunks.get(job, (trimmed // STEP_CHUNK, trimmed // STEP_CHUNK))
            for c in range(lo, trimmed // STEP_CHUNK):  # wholly trimmed: gone (tombstones)
                values[f"{_ETTR_STEPS}{job}:{c}"] = None
            for c in range(hi, total // STEP_CHUNK):  # newly full: written once
                values[f"{_ETTR_STEPS}{job}:{c}"] = {"steps": self.ettr.steps(job, c * STEP_CHUNK,
                                                                              (c + 1) * STEP_CHUNK)}
            hi = max(hi, total // STEP_CHUNK)
            self._chunks[job] = (max(lo, trimmed // STEP_CHUNK), hi)
            values[_ETTR + job] = self.ettr.snapshot(job, steps_from=hi * STEP_CHUNK)
        if values:
            self.journal.put_states(values)

    def observe_checkpoint(self, event: CheckpointEvent) -> None:
        """Apply a checkpoint announcement and journal the job's new checkpoint list."""
        if event.tier and event.tier not in JOURNALED:  # every step, ephemeral: apply, never journal
            self.checkpoints.observe(event)
            return
        before = self.checkpoints.snapshot(event.job)
        self.checkpoints.observe(event)
        after = self.checkpoints.snapshot(event.job)
        if after != before:
            self.journal.put_state(_CKPT + event.job, after)

    def observe_topology(self, record: JobTopology) -> None:
        """Apply a topology announcement; journal it when it differs from the last one."""
        self.engine.observe_topology(record)
        state: dict[str, Any] = msgspec.to_builtins(record)
        state.pop("ts", None)
        encoded = msgspec.json.encode(state)
        if self._topo_seen.get(record.job) != encoded:
            if len(self._topo_seen) >= self.engine.topologies.cap:
                self._topo_seen.pop(next(iter(self._topo_seen)))
            self._topo_seen[record.job] = encoded
            self.journal.put_state(_TOPO + record.job, {**state, "ts": record.ts})

    def engine_state(self) -> dict[str, dict[str, Any]]:
        """The engine's memory, to journal atomically with the decision that changed it."""
        return {_ENGINE: self.engine.snapshot()}
