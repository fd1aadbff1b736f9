"""`TrainguardCallback` for Hugging Face Transformers' `Trainer` (a `TrainerCallback`).

    from trainguard.integrations.huggingface import TrainguardCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[TrainguardCallback(job="llm-7b")])

The Trainer hands callbacks no per-step loss, so the callback reads it where
the model returns it: a forward hook keeps the `.loss` of each forward pass
(averaged over gradient-accumulation micro-batches). A model whose forward
returns no loss (a custom `compute_loss`) is reported at logging steps
only, from the Trainer's logs. The gradient norm is read in
`on_pre_optimizer_step` (after the Trainer's clipping, so at most
`max_grad_norm`; a NaN stays NaN). Tokens per step come from `tokens` or,
by default, the `input_ids` the hook saw (a function of the batch is
Lightning's: the Trainer shows callbacks no batch). The model and the torch optimizer
under accelerate's wrapper go to `trainguard.checkpoint` for every-step
snapshots; restarted by the agent (`TRAINGUARD_RESUME_STEP`), the run
restores the newest copy at `on_train_begin` and numbers its steps after it.
The learning-rate scheduler and the data position are not part of the
snapshot: they restart with the process.
"""

from __future__ import annotations

from typing import Any

from trainguard.integrations.reporter import Reporter, Tokens, as_float, grad_norm

try:
    from transformers import TrainerCallback
except ImportError as exc:
    raise ImportError("trainguard.integrations.huggingface needs Transformers: "
                      "pip install 'trainguard[huggingface]'") from exc


class TrainguardCallback(TrainerCallback):  # type: ignore[misc]
    """Reports a Transformers `Trainer` run to trainguard and keeps every-step checkpoints of it."""

    def __init__(self, *, job: str, tokens: Tokens = None, monitor: Any = None, checkpoint: Any = True,
                 tp: int = 1, pp: int = 1, **monitor_kw: Any) -> None:
        self.reporter = Reporter(job=job, monitor=monitor, checkpoint=checkpoint, tp=tp, pp=pp, **monitor_kw)
        self.tokens = tokens
        self._losses: list[float] = []
        self._seen_tokens = 0
        self._grad: float | None = None
        self._hook: Any = None
        self._captured = False  # the model's forward returns its loss (else: on_log)

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                       **kwargs: Any) -> None:
        self.reporter.start(model, optimizer)
        if model is not None:
            self._hook = model.register_forward_hook(self._forward_done, with_kwargs=True)

    def _forward_done(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        if not module.training:
            return  # evaluation forwards are not training steps
        loss = as_float(getattr(output, "loss", None) if not isinstance(output, dict) else output.get("loss"))
        if loss is not None:
            self._losses.append(loss)
            self._captured = True
        ids = kwargs.get("input_ids") if isinstance(kwargs, dict) else None
        self._seen_tokens += int(ids.numel()) if ids is not None and hasattr(ids, "numel") else 0

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self._grad = grad_norm(model) if model is not None else None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self._losses:
            return  # no loss seen (custom compute_loss): `on_log` reports at logging steps
        loss = sum(self._losses) / len(self._losses)
        tokens = self.tokens if isinstance(self.tokens, int) else self._seen_tokens
        self.reporter.step(int(state.global_step), loss=loss, grad=self._grad, tokens=tokens)
        self._losses, self._seen_tokens = [], 0

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if self._captured or not logs or "loss" not in logs:
            return
        self.reporter.step(int(state.global_step), loss=float(logs["loss"]), grad=logs.get("grad_norm"), tokens=0)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.reporter.saved(int(state.global_step), f"{args.output_dir}/checkpoint-{state.global_step}")

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self.reporter.close()
