"""Which detectors run, with which parameters: one type, many instances."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class DetectorSpec(BaseModel):
    """One configured detector instance."""

    model_config = ConfigDict(extra="forbid")

    type: str
    name: str = ""
    enabled: bool = True
    params: dict[str, Any] = Field(default_factory=dict)

    @property
    def instance(self) -> str:
        return self.name or self.type


def default_specs() -> list[DetectorSpec]:
    """The built-in detectors with their default parameters."""
    return [DetectorSpec(type=t) for t in DEFAULT_TYPES]


DEFAULT_TYPES: tuple[str, ...] = ("nan", "hw_fault", "network", "hang", "slowdown", "loss_spike", "sdc", "user_error")


class CorrelatorSettings(BaseModel):
    """How anomalies merge into incidents."""

    model_config = ConfigDict(extra="forbid")

    window_s: float = Field(300.0, gt=0, description="an incident stays open this long after its last anomaly")


class DetectorSettings(BaseModel):
    """The `detectors:` section of the config."""

    model_config = ConfigDict(extra="forbid")

    instances: list[DetectorSpec] = Field(default_factory=default_specs)
    correlator: CorrelatorSettings = Field(default_factory=CorrelatorSettings)
