"""act's durable state as items, and items as records of a compacted topic (pure).

The local journal is one copy of what `act` knows; a compacted Kafka topic
(`<prefix>act-state`) is the other, so a fresh machine (the PVC lost, a
standby replica taking the Lease) knows exactly what the old `act` knew.
Both hold the same *items*, one per piece of state, each under its own key:

==========================  ==============================================
``decision/<id>``           a decision and its status (approvals included)
``step/<decision>/<idx>``   one plan step's outcome
``intent/<decision>/<idx>`` a command journaled but not yet answered
                            (deleted, as a tombstone, once its step is done)
``state/ckpt:<job>``        the job's checkpoints (tiers included)
``state/topology:<job>``    the job's topology
``state/ettr:<job>``        the job's ETTR accounting
``state/rails``             breaker window, cooldowns, standby pool,
                            evicted/cordoned nodes, restart generations
``state/engine``            the engine's memory of earlier incidents
``state/operator``          operator requests (breaker resets, returns)
``writer``                  the newest writer's epoch (its claim)
==========================  ==============================================

Every change carries a *version* ``(epoch, seq)``: ``epoch`` grows by one at
every start of `act`, ``seq`` by one at every change. The rules:

* `fold`: reading the topic in order (one partition: total order), a record
  of an older epoch that arrives after a newer epoch's record is a stale
  writer's (a zombie still running beside its successor) and is ignored.
* `reconcile`: per key, the newer version of the local journal and the
  topic wins. A local item the topic lacks is kept (and re-published) only
  if it is newer than everything the topic holds, i.e. it was journaled but
  never mirrored; otherwise the topic deleted it (its tombstone may since
  have been compacted away) and it is deleted locally too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

WRITER = "writer"
Version = tuple[int, int]  # (epoch, seq): compared as a tuple, newest wins


@dataclass(frozen=True)
class Item:
    """One piece of act's state at one version; `value` None means deleted (a tombstone)."""

    key: str
    version: Version
    value: Any = None

    @property
    def deleted(self) -> bool:
        """A tombstone: the item no longer exists."""
        return self.value is None


class _Envelope(msgspec.Struct, frozen=True):
    epoch: int
    seq: int
    value: Any = None


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(_Envelope)


def to_record(item: Item) -> tuple[bytes, bytes | None]:
    """The Kafka (key, value) of an item; a deleted item is a tombstone (value None),
    which compaction eventually drops for good."""
    if item.deleted:
        return item.key.encode(), None
    epoch, seq = item.version
    return item.key.encode(), _encoder.encode(_Envelope(epoch, seq, item.value))


def from_record(key: bytes | None, value: bytes | None) -> Item | None:
    """The item a record holds; None for a bare tombstone or a record this mapping cannot read.

    A tombstone carries no version: `fold` dates it at the newest record before
    it in the log, which is where it was written.
    """
    if not key or value is None:
        return None
    try:
        env = _decoder.decode(value)
    except msgspec.DecodeError:
        return None
    return Item(key.decode(), (env.epoch, env.seq), env.value)


@dataclass
class Folded:
    """The topic's view: the newest item per key, the newest version and epoch seen, what was fenced."""

    items: dict[str, Item] = field(default_factory=dict)
    newest: Version = (0, 0)
    epoch: int = 0
    stale: int = 0  # records ignored: an older epoch's writer after a newer one spoke


def fold(records: Iterable[tuple[bytes | None, bytes | None]], into: Folded | None = None) -> Folded:
    """Replay the topic's records in log order into the newest state per key (epoch fencing applied)."""
    out = into or Folded()
    for key, value in records:
        if key and value is None:  # a tombstone: gone, at least as new as everything before it
            name = key.decode()
            out.items[name] = Item(name, out.newest, None)
            continue
        item = from_record(key, value)
        if item is None:
            continue
        if item.version[0] < out.epoch:
            out.stale += 1  # a zombie's write after its successor claimed the topic
            continue
        out.epoch = item.version[0]
        out.newest = max(out.newest, item.version)
        if item.key == WRITER:
            continue
        current = out.items.get(item.key)
        if current is None or item.version >= current.version:
            out.items[item.key] = item
    return out


@dataclass(frozen=True)
class Reconciled:
    """What a starting act does: write `to_local` into its journal, publish `to_publish`
    (its claim first, then the local items the topic lacked, re-versioned under the new
    epoch so `fold` does not fence them), and continue at `epoch` above `seq`."""

    to_local: list[Item]
    to_publish: list[Item]
    epoch: int
    seq: int


def reconcile(local: Mapping[str, Item], remote: Folded, writer: str = "act") -> Reconciled:
    """Merge the local journal's items with the topic's; newest version wins, deterministically.

    >>> remote = fold([to_record(Item("state/rails", (1, 5), {"evicted": {"j": ["n1"]}}))])
    >>> r = reconcile({}, remote)  # a fresh machine: everything comes from the topic
    >>> [i.key for i in r.to_local], [i.key for i in r.to_publish], r.epoch, r.seq
    (['state/rails'], ['writer'], 2, 6)
    """
    local_newest = max((i.version for i in local.values()), default=(0, 0))
    to_local: list[Item] = []
    to_publish: list[Item] = []
    for key in sorted(set(local) | set(remote.items)):
        mine, theirs = local.get(key), remote.items.get(key)
        if theirs is None:
            assert mine is not None
            if mine.version > remote.newest:  # journaled, never mirrored: the topic must learn it
                to_publish.append(mine)
            else:  # the topic deleted it (tombstone compacted away) or never took it from this history
                to_local.append(Item(key, remote.newest, None))
        elif mine is None or theirs.version > mine.version or (theirs.deleted and theirs.version == mine.version):
            if mine is not None and not mine.deleted or not theirs.deleted:
                to_local.append(theirs)  # a tombstone written right after the item carries the item's version
        elif mine.version > theirs.version:
            to_publish.append(mine)
    newest = max(local_newest, remote.newest, (remote.epoch, 0))
    epoch, seq = newest[0] + 1, newest[1] + 1
    ours = [Item(i.key, (epoch, seq + n), i.value) for n, i in enumerate(to_publish, start=1)]
    return Reconciled(to_local + ours, [claim(epoch, seq, writer), *ours], epoch=epoch, seq=seq + len(ours))


def claim(epoch: int, seq: int, writer: str) -> Item:
    """The record a new writer publishes first: from here on, older epochs are fenced."""
    return Item(WRITER, (epoch, seq), {"writer": writer})
