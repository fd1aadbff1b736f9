"""The peer backup: whom a rank backs up to, and the TCP link that carries it.

The peer rule is ByteRobust's: a rank's backup goes to a rank outside its
tensor-, pipeline- and data-parallel groups, on another machine. trainguard
over-evicts whole parallel groups when it cannot name one machine, so a
backup inside any of the rank's groups could be evicted together with it.
Shifting every coordinate by one, (dp+1, tp+1, pp+1), lands outside all
three groups whenever at least two of the dimensions exceed one, and it is
a permutation, so every rank holds exactly one backup (memory stays even).
With fewer parallel dimensions (pure data parallelism: every rank is in one
DP group) no rank satisfies the rule and the backup goes to the same local
rank on the next machine, which still survives the loss of the machine.

The link is plain TCP, not a gloo group: a gloo group breaks when any member
dies, and the moment the backup matters is exactly when a member has died
and a warm standby, not yet in any group, must pull that member's shard.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainguard.checkpoint.layout import checksum
from trainguard.checkpoint.store import Manifest, SlotRing, read_slot_manifests
from trainguard.topology import coordinates

CHUNK = 4 << 20


@dataclass(frozen=True)
class PeerChoice:
    """The peer a rank backs up to, and which rule picked it."""

    peer: int
    rule: str  # "outside_groups" or "next_machine"


def choose_peer(rank: int, *, world_size: int, tp: int = 1, pp: int = 1,
                node_of: Mapping[int, str] | None = None) -> PeerChoice:
    """The rank that holds `rank`'s backup.

    >>> choose_peer(0, world_size=8, tp=2, pp=2)
    PeerChoice(peer=7, rule='outside_groups')
    >>> choose_peer(0, world_size=4, node_of={0: "a", 1: "a", 2: "b", 3: "b"})
    PeerChoice(peer=2, rule='next_machine')
    """
    if world_size < 2:
        raise ValueError("a peer backup needs at least two ranks")
    dp_size = world_size // (tp * pp)
    nodes = node_of or {}
    if sum(1 for size in (dp_size, tp, pp) if size > 1) >= 2:
        dp, t, p = coordinates(rank, world_size=world_size, tp=tp, pp=pp)
        peer = (p + 1) % pp * tp * dp_size + (dp + 1) % dp_size * tp + (t + 1) % tp
        if nodes.get(peer, "peer") != nodes.get(rank, "self"):
            return PeerChoice(peer, "outside_groups")
    per_node = _ranks_per_node(world_size, nodes)
    return PeerChoice((rank + per_node) % world_size, "next_machine")


def backup_source(rank: int, **kwargs: Any) -> int:
    """The rank whose backup `rank` holds (the inverse of `choose_peer`)."""
    world = int(kwargs["world_size"])
    return next(r for r in range(world) if choose_peer(r, **kwargs).peer == rank)


def _ranks_per_node(world_size: int, nodes: Mapping[int, str]) -> int:
    if not nodes:
        return 1
    first = nodes.get(0)
    same = sum(1 for r in range(world_size) if nodes.get(r) == first)
    return max(1, min(same, world_size - 1))


# ---------------------------------------------------------------- server


class BackupServer:
    """Holds other ranks' backups in RAM-backed slot files and serves them back.

    Each source rank gets a two-slot ring (one complete copy kept while the
    next arrives). A backup is committed only after its checksum matches the
    one its sender computed; a corrupt transfer is refused and the previous
    copy stays. Rings live under `root`, so a restarted holder still serves
    what it held.
    """

    def __init__(self, root: Path, *, host: str = "127.0.0.1", port: int = 0, max_sources: int = 2) -> None:
        self.root = root
        self.max_sources = max_sources
        self._rings: dict[tuple[str, int], SlotRing] = {}
        self._last_slot: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                outer._handle(self.rfile, self.wfile, self.connection)

        self._server = socketserver.ThreadingTCPServer((host, port), Handler, bind_and_activate=True)
        self._server.daemon_threads = True
        self.address = f"{host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="trainguard-backup", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _dir(self, job: str, rank: int) -> Path:
        return self.root / f"peer-{job}-{rank}"

    def _handle(self, rfile: Any, wfile: Any, conn: socket.socket) -> None:
        try:
            header = json.loads(rfile.readline())
            op = header.get("op")
            reply: dict[str, Any]
            if op == "put":
                reply = self._put(Manifest(**header["manifest"]), rfile)
            elif op == "get":
                self._get(header, wfile, conn)
                return
            elif op == "list":
                held = read_slot_manifests(self._dir(str(header["job"]), int(header["rank"])))
                reply = {"ok": True, "steps": sorted(m.step for m, _ in held)}
            else:
                reply = {"ok": False, "error": f"unknown op {op!r}"}
        except (ValueError, KeyError, TypeError, OSError) as exc:
            reply = {"ok": False, "error": f"bad request: {exc}"}
        wfile.write(json.dumps(reply).encode() + b"\n")

    def _ring(self, m: Manifest) -> SlotRing:
        key = (m.job, m.rank)
        with self._lock:
            ring = self._rings.get(key)
            if ring is None or ring.nbytes != m.nbytes:
                if ring is None and len(self._rings) >= self.max_sources:
                    raise ValueError(f"already holding {self.max_sources} ranks' backups (max_sources)")
                ring = SlotRing(self._dir(m.job, m.rank), 2, m.nbytes)
                self._rings[key] = ring
            return ring

    def _put(self, m: Manifest, rfile: Any) -> dict[str, Any]:
        ring = self._ring(m)
        held = ring.steps()
        with self._lock:
            last = self._last_slot.get((m.job, m.rank))
            slot = 0 if last is None else 1 - last  # alternate: the last complete copy stays intact
            self._last_slot[(m.job, m.rank)] = slot
        ring.invalidate(slot)
        buf = ring.buffers[slot].numpy()
        got = 0
        while got < m.nbytes:
            n = rfile.readinto(memoryview(buf)[got:m.nbytes])
            if not n:
                return {"ok": False, "error": f"short transfer: {got} of {m.nbytes} bytes"}
            got += n
        if checksum(ring.buffers[slot], m.nbytes) != m.checksum:
            return {"ok": False, "error": "checksum mismatch: backup refused"}
        ring.commit(slot, m)
        for step, i in held.items():
            if step >= m.step and i != slot:  # the sender went back (a restore): that timeline is abandoned
                ring.invalidate(i)
        return {"ok": True, "slot": slot}

    def _get(self, header: dict[str, Any], wfile: Any, conn: socket.socket) -> None:
        """Send the newest held copy matching the request; the client verifies it."""
        want_step, before = header.get("step"), header.get("before")
        held = read_slot_manifests(self._dir(str(header["job"]), int(header["rank"])))
        held = [(m, p) for m, p in held if (want_step is None or m.step == want_step)
                and (before is None or m.step < before)]
        if not held:
            wfile.write(json.dumps({"ok": False, "error": "no such backup"}).encode() + b"\n")
            return
        m, path = max(held, key=lambda mp: mp[0].step)
        wfile.write(json.dumps({"ok": True, "manifest": m.__dict__}).encode() + b"\n")
        wfile.flush()
        with open(path, "rb") as f:
            conn.sendfile(f, 0, m.nbytes)  # zero-copy from the RAM-backed slot to the socket


# ---------------------------------------------------------------- client


def _connect(address: str, timeout_s: float) -> socket.socket:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def send_backup(address: str, manifest: Manifest, payload: Any, *, max_bytes_per_s: float = 0.0,
                timeout_s: float = 60.0) -> dict[str, Any]:
    """Ship one snapshot to the peer at `address`; returns the peer's reply.

    `max_bytes_per_s` caps the link (0: unbounded) so backups never crowd out
    the job's own traffic.
    """
    data = memoryview(payload.numpy() if hasattr(payload, "numpy") else payload)[:manifest.nbytes]
    with _connect(address, timeout_s) as sock:
        sock.sendall(json.dumps({"op": "put", "manifest": manifest.__dict__}).encode() + b"\n")
        t0 = time.perf_counter()
        for off in range(0, manifest.nbytes, CHUNK):
            sock.sendall(data[off:off + CHUNK])
            if max_bytes_per_s > 0:
                ahead = (off + CHUNK) / max_bytes_per_s - (time.perf_counter() - t0)
                if ahead > 0:
                    time.sleep(ahead)
        reply: dict[str, Any] = json.loads(sock.makefile("rb").readline() or b"{}")
        return reply


def list_backups(address: str, job: str, rank: int, *, timeout_s: float = 10.0) -> list[int]:
    """Steps of `rank` the peer at `address` holds; [] when it is unreachable."""
    try:
        with _connect(address, timeout_s) as sock:
            sock.sendall(json.dumps({"op": "list", "job": job, "rank": rank}).encode() + b"\n")
            reply = json.loads(sock.makefile("rb").readline() or b"{}")
    except (OSError, ValueError):
        return []
    return [int(s) for s in reply.get("steps", [])]


def fetch_backup(address: str, job: str, rank: int, *, step: int | None = None, before: int | None = None,
                 timeout_s: float = 60.0) -> tuple[Manifest, bytearray] | None:
    """Pull `rank`'s backup from the peer holding it; None if it holds none (unverified)."""
    with _connect(address, timeout_s) as sock:
        sock.sendall(json.dumps({"op": "get", "job": job, "rank": rank, "step": step, "before": before}).encode()
                     + b"\n")
        f = sock.makefile("rb")
        header = json.loads(f.readline() or b"{}")
        if not header.get("ok"):
            return None
        m = Manifest(**header["manifest"])
        buf = bytearray(m.nbytes)
        got = 0
        while got < m.nbytes:
            n = f.readinto(memoryview(buf)[got:])
            if not n:
                break
            got += n
        return m, buf[:got]
