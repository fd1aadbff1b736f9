"""Page-locking the memory slots for the GPU, and saying so when it fails.

A device-to-host copy is asynchronous (a side stream overlapping the next
step) only into page-locked host memory; into ordinary pages the driver
stages it through a bounce buffer and the copy blocks the stream. The slots
are mapped files in /dev/shm, so they cannot come from the CUDA allocator:
they are registered in place (`cudaHostRegister`). Registration can fail (a
container's locked-memory limit, a platform without it): the copy then still
works, only slower, so a failure is logged and reported (`SlotRing.pinned`),
never raised. Registered memory must be unregistered before it is unmapped.

The CUDA runtime comes in as an argument (`torch.cuda.cudart()` by default),
so the bookkeeping is tested without a GPU.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

REGISTER_DEFAULT = 0  # cudaHostRegisterDefault


def cuda_runtime() -> Any | None:
    """torch's CUDA runtime bindings when a CUDA device is usable, else None."""
    import torch

    return torch.cuda.cudart() if torch.cuda.is_available() else None


def register(buffer: Any, nbytes: int, cudart: Any) -> bool:
    """Page-lock `nbytes` of `buffer` (a CPU uint8 tensor); True when the runtime says it did."""
    err = cudart.cudaHostRegister(buffer.data_ptr(), nbytes, REGISTER_DEFAULT)
    if err == cudart.cudaError.success:
        return True
    log.warning("could not page-lock a %d-byte checkpoint slot (%s): device-to-host copies into it will be "
                "synchronous", nbytes, _describe(cudart, err))
    return False


def unregister(buffer: Any, cudart: Any) -> None:
    """Undo `register` (before the mapping goes away); a failure is logged, not raised."""
    err = cudart.cudaHostUnregister(buffer.data_ptr())
    if err != cudart.cudaError.success:
        log.warning("could not unregister a checkpoint slot (%s)", _describe(cudart, err))


def _describe(cudart: Any, err: Any) -> str:
    try:
        return str(cudart.cudaGetErrorString(err))
    except Exception:  # a binding without it: the code is still worth logging
        return f"CUDA error {err!r}"
