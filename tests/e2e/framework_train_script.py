"""A tiny real training run on the CPU under a framework, reported by trainguard's callback.

    python framework_train_script.py lightning|huggingface --job J --steps N [--nan-at K]

`--nan-at K` makes step K's loss NaN inside the graph, as an overflow would:
its gradients are NaN, the optimizer writes NaN weights, and every later loss
is NaN too. (The weights change only in the optimizer step, as the every-step
checkpoint's copy assumes.) Every-step checkpoints go to
the RAM directory in $TG_TEST_SHM. Kafka location and resume point come from the
environment, as under `trainguard run` (TRAINGUARD_BROKER__BOOTSTRAP,
TRAINGUARD_TOPICS__PREFIX, TRAINGUARD_RESUME_STEP). Prints one line per step.
"""

from __future__ import annotations

import argparse
import os

import torch

from trainguard.checkpoint import CheckpointConfig


def checkpoint_config() -> CheckpointConfig:
    return CheckpointConfig(memory_dir=os.environ["TG_TEST_SHM"], peer=False)


def lightning_run(job: str, steps: int, nan_at: int) -> None:
    import lightning as L

    from trainguard.integrations.lightning import TrainguardCallback

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            if nan_at and self.global_step == nan_at - 1:
                loss = loss * float("nan")
            print(f"step {self.global_step + 1} loss {float(loss):.4f}", flush=True)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=1e-2)

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=gen)
    data = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[TrainguardCallback(job=job, tokens=lambda b: b[0].shape[0],
                                                      checkpoint=checkpoint_config(), heartbeat_interval_s=1.0)])
    trainer.fit(Tiny(), loader)


def huggingface_run(job: str, steps: int, nan_at: int, out: str) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    from trainguard.integrations.huggingface import TrainguardCallback

    def poison(module, args, output):  # type: ignore[no-untyped-def]
        output.loss = output.loss * float("nan")
        return output

    class Corrupt(TrainerCallback):  # type: ignore[misc]
        hook = None

        def on_step_begin(self, args, state, control, model=None, **kw):  # type: ignore[no-untyped-def]
            if nan_at and state.global_step == nan_at - 1:
                self.hook = model.register_forward_hook(poison, prepend=True)  # before the callback's reader
            elif self.hook is not None:
                self.hook.remove()
                self.hook = None

        def on_step_end(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
            print(f"step {state.global_step}", flush=True)

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2))
    gen = torch.Generator().manual_seed(0)
    rows = [torch.randint(0, 64, (16,), generator=gen) for _ in range(128)]
    data = [{"input_ids": r, "labels": r.clone()} for r in rows]
    args = TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=4, learning_rate=1e-3,
                             logging_steps=1000, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
                             dataloader_num_workers=0, seed=0)
    callback = TrainguardCallback(job=job, checkpoint=checkpoint_config(), heartbeat_interval_s=1.0)
    Trainer(model=model, args=args, train_dataset=data, callbacks=[Corrupt(), callback]).train()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("framework", choices=["lightning", "huggingface"])
    p.add_argument("--job", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--nan-at", type=int, default=0)
    p.add_argument("--out", default="hf-out")
    a = p.parse_args()
    if a.framework == "lightning":
        lightning_run(a.job, a.steps, a.nan_at)
    else:
        huggingface_run(a.job, a.steps, a.nan_at, a.out)


if __name__ == "__main__":
    main()
