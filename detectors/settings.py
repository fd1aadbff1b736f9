"""Which detectors run, with which parameters: one type, many instances."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trainguard.schemas.kinds import ANOMALY_KINDS


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


# One built-in detector per built-in kind, of the same name (schemas.kinds), the NaN detector first as it
# always ran: the order of a record's findings is part of what a replay reproduces.
DEFAULT_TYPES: tuple[str, ...] = ("nan", *(kind for kind in ANOMALY_KINDS if kind != "nan"))


class CorrelatorSettings(BaseModel):
    """How anomalies merge into incidents."""

    model_config = ConfigDict(extra="forbid")

    window_s: float = Field(300.0, gt=0, description="an incident stays open this long after its last anomaly")


class DetectorSettings(BaseModel):
    """The `detectors:` section of the config."""

    model_config = ConfigDict(extra="forbid")

    instances: list[DetectorSpec] = Field(default_factory=default_specs)
    correlator: CorrelatorSettings = Field(default_factory=CorrelatorSettings)
