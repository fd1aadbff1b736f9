"""Which keys may sign a job's checkpoint and topology records (pure; the caller journals).

A checkpoint announcement chooses what a restart resumes from, a topology
chooses where it goes and how big the job is for the breaker's per-job share.
Kafka ACLs cannot say "only job J's processes may write J's records" (every
training pod writes the same topics), so signatures do: each time an agent
starts a training process it mints a key for that attempt, hands the private
half to the process as a file and announces the public half in an
`AttemptKey` signed with its node key. Here act decides which announcements
it believes and which records those keys vouch for.

An announcement (already checked to be signed by the node it names) counts when:

* its attempt is not older than the job's current one (an old attempt's key is a replay);
* attempt 0: trust on first use, from any node until the job has a topology, then only
  from the job's members (a job act never restarted has no better witness);
* attempt N > 0: act itself sent the restart that started attempt N to that node
  (`commanded`): no node can open an attempt act did not order, nor join one it was
  not sent to.

A newer attempt forgets every key of the older ones, so records of an earlier attempt
cannot be replayed into the current one. A record counts when a current key signed its
exact bytes; a checkpoint naming a node (a peer copy names the node holding it) must name
a node of the attempt; a topology
must be signed by one of the nodes it lists, and every node it lists must have announced
a key for the attempt (no topology is larger than the agents that answered).

Records and announcements travel on different topics and producers, so a record may
arrive just before its key: such a record is *held* (`Verdict.wait`), bounded per job,
and judged again when the job's next key arrives; everything else is refused with a reason.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from trainguard.schemas.bounded import Bounded
from trainguard.schemas.records import AttemptKey, CheckpointEvent, JobTopology
from trainguard.schemas.signing import KID_HEADER, SIG_HEADER, parse_key_id, public_b64, public_from_b64

JobRecord = CheckpointEvent | JobTopology
Headers = Sequence[tuple[str, bytes]]
PREFIX = "attempt_keys:"  # journal state key prefix, one blob per job


@dataclass(frozen=True)
class Verdict:
    """`problem` "" and not `wait`: trusted. `wait`: not judgeable yet (its key may be in flight)."""

    problem: str = ""
    wait: bool = False


@dataclass(frozen=True)
class Held:
    """A record waiting for its key, with the exact bytes and headers it arrived with."""

    record: JobRecord
    value: bytes
    headers: list[tuple[str, bytes]]
    topic: str = ""
    offset: int = -1


@dataclass
class JobKeys:
    """One job's current attempt and each node's announced key for it."""

    attempt: int
    keys: dict[str, tuple[str, Ed25519PublicKey]] = field(default_factory=dict)  # key id -> (node, key)

    def of_node(self, node: str) -> list[str]:
        """The key ids `node` announced for this attempt."""
        return [kid for kid, (n, _) in self.keys.items() if n == node]

    def nodes(self) -> set[str]:
        """Every node that announced a key for this attempt."""
        return {n for n, _ in self.keys.values()}


class AttemptKeys:
    """Per job: the current attempt's keys, and the records waiting for one."""

    def __init__(self, *, max_jobs: int = 4096, max_held: int = 256) -> None:
        self.jobs: Bounded[str, JobKeys] = Bounded(max_jobs)
        self.max_held = max_held
        self._held: Bounded[str, deque[Held]] = Bounded(max_jobs)
        # The highest attempt any node-signed announcement of the job named, believed or not: a job's
        # agents may be ahead of act (a hot update act did not send), and act's next restart must
        # then go beyond them, or the agents' adopted attempt would be one act never started.
        self.announced: Bounded[str, int] = Bounded(max_jobs)

    def saw(self, rec: AttemptKey) -> None:
        """Note the attempt of a correctly node-signed announcement (before judging it)."""
        self.announced[rec.job] = max(self.announced.get(rec.job, 0), rec.attempt)

    # ------------------------------------------------------------ announcements

    def key_problem(self, rec: AttemptKey, *, commanded: tuple[int, Sequence[str]] | None,
                    members: Iterable[str] | None) -> str:
        """Why a node-signed announcement must not be believed ("" if it may).

        `commanded`: (attempt, nodes) of the last restart act sent the job; `members`: the
        job's nodes by its accepted topology (None while it has none).
        """
        if parse_key_id(rec.key_id) != (rec.job, rec.attempt, rec.node):
            return f"key id {rec.key_id!r} does not name job {rec.job}, attempt {rec.attempt}, node {rec.node}"
        try:
            public_from_b64(rec.public_key)
        except ValueError as exc:
            return f"public key unusable: {exc}"
        current = self.jobs.get(rec.job)
        if current is not None and rec.attempt < current.attempt:
            return f"attempt {rec.attempt} is older than job {rec.job}'s current attempt {current.attempt}"
        if rec.attempt == 0:
            known = None if members is None else set(members)
            if known is not None and rec.node not in known:
                return f"node {rec.node} is not a member of job {rec.job} (its topology lists {sorted(known)})"
            return ""
        if commanded is None or commanded[0] != rec.attempt:
            return (f"act never started attempt {rec.attempt} of job {rec.job} "
                    f"(its last restart: {'none' if commanded is None else f'attempt {commanded[0]}'})")
        if rec.node not in commanded[1]:
            return f"attempt {rec.attempt} of job {rec.job} was not sent to node {rec.node}"
        return ""

    def admit(self, rec: AttemptKey) -> list[Held]:
        """Believe `rec` (after `key_problem` said ""); returns the job's held records, to judge again."""
        current = self.jobs.get(rec.job)
        if current is None or rec.attempt > current.attempt:
            current = self.jobs[rec.job] = JobKeys(rec.attempt)  # older attempts' keys: forgotten
        for kid in current.of_node(rec.node):  # one key per node and attempt: its newest start
            del current.keys[kid]
        current.keys[rec.key_id] = (rec.node, public_from_b64(rec.public_key))
        return list(self._held.pop(rec.job, None) or ())

    # ------------------------------------------------------------ records

    def verify(self, record: JobRecord, value: bytes, headers: Headers | None) -> Verdict:
        """Whether a current attempt key of `record.job` signed exactly `value` (see the module doc)."""
        found = dict(headers or [])
        kid_raw, sig = found.get(KID_HEADER), found.get(SIG_HEADER)
        if not kid_raw or not sig:
            return Verdict("unsigned (no tg-kid/tg-sig headers): not from an attempt of the job")
        kid = kid_raw.decode(errors="replace")
        parsed = parse_key_id(kid)
        if parsed is None:
            return Verdict(f"key id {kid!r} is not an attempt key")
        job, attempt, node = parsed
        if job != record.job:
            return Verdict(f"signed with a key of job {job}, not {record.job}")
        current = self.jobs.get(job)
        if current is None or kid not in current.keys:
            return self._unknown_key(current, kid, attempt, node)
        key_node, key = current.keys[kid]
        try:
            key.verify(sig, value)
        except InvalidSignature:
            return Verdict(f"signature does not verify with key {kid}")
        return _fits(record, key_node, current)

    @staticmethod
    def _unknown_key(current: JobKeys | None, kid: str, attempt: int, node: str) -> Verdict:
        if current is None or attempt > current.attempt:
            return Verdict(f"key {kid} not announced (yet)", wait=True)
        if attempt < current.attempt:
            return Verdict(f"key of attempt {attempt}; the job is at attempt {current.attempt} (an old record?)")
        if current.of_node(node):
            return Verdict(f"key {kid} is not the one node {node} announced for attempt {attempt}")
        return Verdict(f"key {kid} not announced (yet)", wait=True)

    def hold(self, held: Held) -> Held | None:
        """Keep a record until its job's next key; returns the oldest one pushed out (refuse it), if any."""
        queue = self._held.get(held.record.job)
        if queue is None:
            queue = self._held[held.record.job] = deque()
        queue.append(held)
        return queue.popleft() if len(queue) > self.max_held else None

    # ------------------------------------------------------------ journal

    def snapshot(self, job: str) -> dict[str, object]:
        """The job's believed keys, as the journal keeps them (held records are not kept: see docs)."""
        current = self.jobs.get(job)
        if current is None:
            return {}
        return {"attempt": current.attempt, "announced": self.announced.get(job, current.attempt),
                "keys": {kid: {"node": n, "key": public_b64(k)} for kid, (n, k) in current.keys.items()}}

    def restore(self, job: str, state: dict[str, object]) -> None:
        """Load what `snapshot` wrote."""
        keys = state.get("keys")
        if not isinstance(keys, dict):
            return
        current = self.jobs[job] = JobKeys(int(str(state.get("attempt", 0))))
        self.announced[job] = max(current.attempt, int(str(state.get("announced", 0))))
        for kid, entry in keys.items():
            current.keys[str(kid)] = (str(entry["node"]), public_from_b64(str(entry["key"])))


def _fits(record: JobRecord, key_node: str, current: JobKeys) -> Verdict:
    """What a good signature still does not allow: speaking for another node, or listing silent nodes."""
    if isinstance(record, CheckpointEvent):  # a peer copy names the machine that holds it: one of the attempt's
        if record.node and record.node not in current.nodes():
            return Verdict(f"a copy on node {record.node}, which announced no key for attempt {current.attempt}",
                           wait=True)
        return Verdict()
    listed = set(record.rank_nodes.values())
    if key_node not in listed:
        return Verdict(f"a topology signed by node {key_node}, which it does not list")
    if missing := sorted(listed - current.nodes()):
        return Verdict(f"nodes {', '.join(missing)} announced no key for attempt {current.attempt}", wait=True)
    return Verdict()
