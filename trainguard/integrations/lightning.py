"""`TrainguardCallback` for Lightning (`lightning` or `pytorch_lightning`): one line in the Trainer.

    from trainguard.integrations.lightning import TrainguardCallback
    trainer = lightning.Trainer(callbacks=[TrainguardCallback(job="llm-7b", tokens=lambda b: b[0].numel())])

Per optimizer step (`on_train_batch_end` after the step; gradient
accumulation reports once per step) it publishes the step with its loss
(`outputs["loss"]`, automatic optimisation), the gradient norm (read in
`on_before_optimizer_step`, before Lightning clips), tokens and so MFU when
`tokens` and the GPU's peak are known, and snapshots model and optimizer
(every step, `trainguard.checkpoint`). A checkpoint Lightning's
`ModelCheckpoint` writes is announced with its path. Restarted by the
agent, the run first restores the newest copy (`TRAINGUARD_RESUME_STEP`)
into the live module and optimizer, and numbers its steps after it.
"""

from __future__ import annotations

from typing import Any

from trainguard.integrations.reporter import Reporter, Tokens, as_float, count_tokens, grad_norm

try:
    from lightning.pytorch import Callback
except ImportError:  # the older package name
    try:
        from pytorch_lightning import Callback  # type: ignore[no-redef,assignment]
    except ImportError as exc:
        raise ImportError("trainguard.integrations.lightning needs Lightning: pip install 'trainguard[lightning]'") \
            from exc


class TrainguardCallback(Callback):  # type: ignore[misc]
    """Reports a Lightning run to trainguard and keeps every-step checkpoints of it."""

    def __init__(self, *, job: str, tokens: Tokens = None, monitor: Any = None, checkpoint: Any = True,
                 tp: int = 1, pp: int = 1, **monitor_kw: Any) -> None:
        super().__init__()
        self.reporter = Reporter(job=job, monitor=monitor, checkpoint=checkpoint, tp=tp, pp=pp, **monitor_kw)
        self.tokens = tokens
        self._grad: float | None = None
        self._last_step = -1

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        optimizer = trainer.optimizers[0] if trainer.optimizers else None
        self.reporter.start(pl_module, optimizer)

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self._grad = grad_norm(pl_module)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = int(trainer.global_step)
        if step == self._last_step:
            return  # gradient accumulation: no optimizer step since the last report
        self._last_step = step
        loss = as_float(outputs.get("loss") if isinstance(outputs, dict) else outputs)
        if loss is not None:
            self.reporter.step(step, loss=loss, grad=self._grad, tokens=count_tokens(self.tokens, batch))
        saver = getattr(trainer, "checkpoint_callback", None)
        path = getattr(saver, "last_model_path", "") or getattr(saver, "best_model_path", "")
        if path:
            self.reporter.saved(step, str(path))

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.reporter.close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.reporter.close()  # deliver what is queued: the last steps tell why it stopped
