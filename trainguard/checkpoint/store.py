"""Where snapshots live: memory slots, and snapshot files on a disk or a durable store.

The memory tier is a ring of slot files under a RAM-backed directory
(`/dev/shm` by default), mapped into the process with `torch.from_file`. A
slot is CPU memory, but it outlives the training process: a process restart
on the same machine reloads from it without touching a disk. Each slot has a
manifest written only once its payload is complete and checksummed, and
removed before the slot is overwritten, so a crash mid-write never leaves a
slot that looks valid.

Disk and durable copies are the same manifest + payload pair written to a
directory, or through fsspec to any URL it knows (s3://, gs://, ...).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import trainguard.checkpoint.pinned as pinned
from trainguard.checkpoint.layout import Layout, checksum


@dataclass
class Manifest:
    """What a payload holds: which rank, which step, its layout and checksum."""

    job: str
    rank: int
    step: int
    nbytes: int
    checksum: str
    layout: list[list[Any]]
    skeleton: str  # base64 msgpack
    world_size: int = 1
    extra: dict[str, Any] = field(default_factory=dict)

    def encode(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def decode(cls, data: bytes) -> Manifest:
        return cls(**json.loads(data))

    def layout_obj(self) -> Layout:
        return Layout.from_json(self.layout, self.nbytes)

    def skeleton_bytes(self) -> bytes:
        return base64.b64decode(self.skeleton)


def memory_root(job: str, configured: str | None = None) -> Path:
    """`/dev/shm/trainguard/<job>` where /dev/shm exists, else a temp dir."""
    if configured:
        return Path(configured)
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(os.environ.get("TMPDIR", "/tmp"))
    return base / "trainguard" / job


class SlotRing:
    """`count` reusable buffers of `nbytes` each, with per-slot manifests.

    With `cudart` (the CUDA runtime) every buffer is page-locked, so copies
    from the GPU into it run asynchronously; `pinned` says whether all were.
    `close()` unlocks them before the ring is dropped.
    """

    def __init__(self, directory: Path, count: int, nbytes: int, *, cudart: Any = None) -> None:
        import torch

        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.nbytes = nbytes
        self.buffers: list[Any] = []
        self._cudart = cudart
        self._registered: list[Any] = []
        for i in range(count):
            path = self.dir / f"slot{i}.bin"
            if path.exists() and path.stat().st_size != nbytes:
                self._manifest_path(i).unlink(missing_ok=True)
            buf = torch.from_file(str(path), shared=True, size=nbytes, dtype=torch.uint8)
            if cudart is not None and pinned.register(buf, nbytes, cudart):
                self._registered.append(buf)
            self.buffers.append(buf)
        self.pinned = cudart is not None and len(self._registered) == count

    def close(self) -> None:
        """Unlock the page-locked buffers (the files and their manifests stay: they are the snapshots)."""
        for buf in self._registered:
            pinned.unregister(buf, self._cudart)
        self._registered = []
        self.pinned = False

    def _manifest_path(self, i: int) -> Path:
        return self.dir / f"slot{i}.json"

    def invalidate(self, i: int) -> None:
        self._manifest_path(i).unlink(missing_ok=True)

    def commit(self, i: int, manifest: Manifest) -> None:
        tmp = self.dir / f".slot{i}.json.tmp"
        tmp.write_bytes(manifest.encode())
        os.replace(tmp, self._manifest_path(i))

    def manifest(self, i: int) -> Manifest | None:
        try:
            return Manifest.decode(self._manifest_path(i).read_bytes())
        except (OSError, ValueError, TypeError):
            return None

    def steps(self) -> dict[int, int]:
        """step -> slot for every committed slot."""
        out: dict[int, int] = {}
        for i in range(len(self.buffers)):
            m = self.manifest(i)
            if m is not None:
                out[m.step] = i
        return out


def read_slot_manifests(directory: Path) -> list[tuple[Manifest, Path]]:
    """Committed slots in a ring directory, without mapping it (a fresh process looking for its state)."""
    out = []
    for path in sorted(directory.glob("slot*.json")):
        try:
            out.append((Manifest.decode(path.read_bytes()), path.with_suffix(".bin")))
        except (OSError, ValueError, TypeError):
            continue
    return out


def open_payload(payload: Path | bytes | bytearray, nbytes: int) -> Any | None:
    """A uint8 tensor over a copy's bytes without copying them (a private map of a file); None if truncated."""
    import torch

    if isinstance(payload, Path):
        try:
            if payload.stat().st_size < nbytes:
                return None
        except OSError:
            return None
        return torch.from_file(str(payload), shared=False, size=nbytes, dtype=torch.uint8)
    if len(payload) < nbytes:
        return None
    data = payload if isinstance(payload, bytearray) else bytearray(payload)
    return torch.frombuffer(data, dtype=torch.uint8, count=nbytes) if nbytes else torch.empty(0, dtype=torch.uint8)


def load_verified(manifest: Manifest, payload: Path | bytes | bytearray) -> Any | None:
    """The payload as a uint8 tensor if its checksum matches, else None (corrupt or partial)."""
    data = open_payload(payload, manifest.nbytes)
    if data is None or checksum(data, manifest.nbytes) != manifest.checksum:
        return None
    return data


# ---------------------------------------------------------------- files


def _is_url(root: str) -> bool:
    return "://" in root and not root.startswith("file://")


def _fs(root: str) -> tuple[Any, str]:
    """(filesystem, path) for a URL via fsspec, or (None, path) for a plain directory."""
    if not _is_url(root):
        return None, root.removeprefix("file://")
    try:
        import fsspec
    except ImportError as exc:
        raise ValueError(f"durable store {root!r} is a URL but fsspec is not installed") from exc
    fs, path = fsspec.core.url_to_fs(root)
    return fs, path


def snapshot_dir(root: str, job: str, step: int) -> str:
    return f"{root.rstrip('/')}/{job}/step-{step:08d}"


def write_files(root: str, manifest: Manifest, payload: Any, *, keep: int = 0) -> str:
    """Write payload then manifest (the manifest last: its presence means complete); return the location."""
    where = snapshot_dir(root, manifest.job, manifest.step)
    name = f"rank-{manifest.rank:05d}"
    data = memoryview(payload.numpy() if hasattr(payload, "numpy") else payload)[:manifest.nbytes]
    fs, path = _fs(where)
    if fs is None:
        Path(path).mkdir(parents=True, exist_ok=True)
        with open(f"{path}/{name}.bin", "wb") as f:
            f.write(data)
        tmp = Path(f"{path}/.{name}.json.tmp")
        tmp.write_bytes(manifest.encode())
        os.replace(tmp, f"{path}/{name}.json")
    else:
        fs.makedirs(path, exist_ok=True)
        fs.pipe_file(f"{path}/{name}.bin", bytes(data))
        fs.pipe_file(f"{path}/{name}.json", manifest.encode())
    if keep > 0:
        _prune(root, manifest.job, manifest.rank, keep)
    return where


def read_files(root: str, job: str, rank: int, step: int | None = None,
               before: int | None = None) -> list[tuple[Manifest, Path | bytes]]:
    """Snapshots of `rank` newest first (all, one `step`, or those before `before`), unverified.

    A local file's payload is returned as its path (mapped later, only if used)."""
    out: list[tuple[Manifest, Path | bytes]] = []
    for s in reversed(list_steps(root, job)):
        if (step is not None and s != step) or (before is not None and s >= before):
            continue
        fs, path = _fs(snapshot_dir(root, job, s))
        name = f"{path}/rank-{rank:05d}"
        try:
            if fs is None:
                out.append((Manifest.decode(Path(f"{name}.json").read_bytes()), Path(f"{name}.bin")))
            else:
                out.append((Manifest.decode(fs.cat_file(f"{name}.json")), fs.cat_file(f"{name}.bin")))
        except (OSError, ValueError, TypeError, FileNotFoundError):
            continue
    return out


def list_rank_steps(root: str, job: str, rank: int) -> list[int]:
    """Steps for which `rank` has a complete copy (its manifest) under `root`."""
    out = []
    for s in list_steps(root, job):
        fs, path = _fs(snapshot_dir(root, job, s))
        name = f"{path}/rank-{rank:05d}.json"
        try:
            if fs.exists(name) if fs else Path(name).exists():
                out.append(s)
        except OSError:
            continue
    return out


def list_steps(root: str, job: str) -> list[int]:
    fs, path = _fs(f"{root.rstrip('/')}/{job}")
    try:
        names = [Path(p).name for p in (fs.ls(path, detail=False) if fs else os.listdir(path))]
    except (OSError, FileNotFoundError):
        return []
    return sorted(int(n[5:]) for n in names if n.startswith("step-") and n[5:].isdigit())


def drop_rank_after(root: str, job: str, rank: int, step: int) -> None:
    """Remove `rank`'s files of every step after `step` (an abandoned timeline)."""
    _remove(root, job, rank, [s for s in list_steps(root, job) if s > step])


def _prune(root: str, job: str, rank: int, keep: int) -> None:
    """Drop this rank's files of all but the newest `keep` steps (other ranks prune their own)."""
    _remove(root, job, rank, list_steps(root, job)[:-keep])


def _remove(root: str, job: str, rank: int, steps: list[int]) -> None:
    for s in steps:
        fs, path = _fs(snapshot_dir(root, job, s))
        for suffix in (".json", ".bin"):
            target = f"{path}/rank-{rank:05d}{suffix}"
            try:
                fs.rm(target) if fs else Path(target).unlink(missing_ok=True)
            except (OSError, FileNotFoundError):
                pass
        try:  # another rank may empty and remove the same step's directory at the same moment
            if fs is None and not any(Path(path).iterdir()):
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass
