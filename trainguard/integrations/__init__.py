"""Framework callbacks: a Lightning or Transformers training run reports to trainguard with one line.

    trainer = lightning.Trainer(callbacks=[trainguard.integrations.lightning.TrainguardCallback(job="llm")])
    trainer = transformers.Trainer(..., callbacks=[trainguard.integrations.huggingface.TrainguardCallback(job="llm")])

Each callback publishes what `trainguard.TrainingMonitor` publishes (steps with
loss, grad norm, step time, tokens and MFU where computable; heartbeats;
phases; checkpoint announcements) and hands the model and optimizer to a
`trainguard.checkpoint.CheckpointManager` for every-step checkpoints, so a
restart by the agent (`TRAINGUARD_RESUME_STEP`) resumes from the newest copy.
The frameworks are optional extras (`trainguard[lightning]`,
`trainguard[huggingface]`); nothing here imports them until a callback module
is imported.
"""
