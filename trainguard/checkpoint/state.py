"""What state a rank checkpoints, for plain modules and for sharded (FSDP2 / DTensor) ones.

A sharded model goes through `torch.distributed.checkpoint.state_dict`, the
API FSDP and DCP share: it returns each rank's shards as DTensors (and
initialises an empty optimizer's state, so a fresh replacement process has
the same layout as the rank it replaces). Plain modules use their own
`state_dict()`, which is free: references, no copies.
"""

from __future__ import annotations

from typing import Any


def is_sharded(model: Any) -> bool:
    return any(type(p).__name__ == "DTensor" for p in model.parameters())


def get_state(model: Any, optimizer: Any = None) -> dict[str, Any]:
    """{"model": ..., "optim": ...} of this rank (its shards when sharded)."""
    if is_sharded(model):
        from torch.distributed.checkpoint.state_dict import get_state_dict

        msd, osd = get_state_dict(model, [optimizer] if optimizer is not None else [])
        return {"model": msd, "optim": osd}
    return {"model": model.state_dict(), "optim": optimizer.state_dict() if optimizer is not None else {}}


def set_state(model: Any, optimizer: Any, state: dict[str, Any]) -> None:
    """Load what `get_state` returned back into the live model and optimizer."""
    if is_sharded(model):
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(model, [optimizer] if optimizer is not None else [],
                       model_state_dict=state["model"], optim_state_dict=state["optim"])
        return
    model.load_state_dict(state["model"])
    if optimizer is not None and state.get("optim"):
        optimizer.load_state_dict(state["optim"])
