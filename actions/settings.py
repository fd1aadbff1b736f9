"""The `actions:` section of the config."""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr


class ActionSettings(BaseModel):
    """How incidents become actions."""

    dry_run: bool = False
    executor: str = Field("local", pattern="^(local|kubernetes|slurm)$")
    hmac_key: SecretStr = Field(SecretStr("trainguard-dev-key"), description="signs action commands")
    group_id: str = "trainguard-actions"
