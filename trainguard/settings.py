"""All configuration in one typed tree: YAML file, then TRAINGUARD_* env vars.

Each package owns the model of its own section (detectors.settings,
actions.settings, collectors.settings, streams.settings; broker and topics
in schemas.kafka_config, signing keys in schemas.keys, because collectors
and streams both read them); this module only composes them. Environment variables
override the file, with `__` between levels, e.g.
`TRAINGUARD_BROKER__PORT=19092`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, YamlConfigSettingsSource

from trainguard.actions.settings import ActionSettings
from trainguard.collectors.settings import CollectorSettings
from trainguard.detectors.settings import DetectorSettings
from trainguard.schemas.kafka_config import BrokerSettings, TopicSettings
from trainguard.schemas.keys import SecuritySettings
from trainguard.streams.console.settings import ConsoleSettings
from trainguard.streams.settings import MetricsSettings, WorkerSettings

__all__ = ["BrokerSettings", "ConfigError", "MetricsSettings", "Settings", "TopicSettings", "WorkerSettings",
           "load_settings"]  # the section models are re-exported: older code imports them from here


class Settings(BaseSettings):
    """The whole configuration tree."""

    model_config = SettingsConfigDict(
        env_prefix="TRAINGUARD_", env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    broker: BrokerSettings = Field(default_factory=BrokerSettings)
    topics: TopicSettings = Field(default_factory=TopicSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    detectors: DetectorSettings = Field(default_factory=DetectorSettings)
    actions: ActionSettings = Field(default_factory=ActionSettings)
    collectors: CollectorSettings = Field(default_factory=CollectorSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    console: ConsoleSettings = Field(default_factory=ConsoleSettings)
    security: SecuritySettings = Field(default_factory=SecuritySettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Precedence: explicit arguments, then TRAINGUARD_* variables, then the file.
        return (init_settings, env_settings, YamlConfigSettingsSource(settings_cls))


class ConfigError(ValueError):
    """A configuration value is invalid; the message is one line naming it."""


def load_settings(path: Path | str | None = None, **overrides: Any) -> Settings:
    """Load settings from `path` (YAML) and the environment.

    Raises `ConfigError` with one line, `key: problem`, on the first bad value.
    """
    yaml_path = Path(path) if path else None
    if yaml_path is not None and not yaml_path.is_file():
        raise ConfigError(f"config file {yaml_path}: not found")
    # A subclass per load carries the file path, so no global state is needed.
    config = SettingsConfigDict(**{**Settings.model_config, "yaml_file": yaml_path})
    loader = type("FileSettings", (Settings,), {"model_config": config})
    try:
        settings = loader(**overrides)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc)) from None
    except Exception as exc:  # YAML syntax errors and the like
        raise ConfigError(f"config file {yaml_path}: {exc}".replace("\n", " ")) from None
    _check_detectors(settings)
    return settings


def _check_detectors(settings: Settings) -> None:
    """Validate every detector's type and parameters now, so a typo fails before anything starts."""
    from importlib.metadata import entry_points

    from trainguard.detectors.registry import GROUP, UnknownDetector, validate_params

    eps = list(entry_points(group=GROUP))  # scanned once: the scan is slow
    for i, spec in enumerate(settings.detectors.instances):
        where = f"detectors.instances[{i}]"
        try:
            spec.params = validate_params(spec.type, spec.params, eps)
        except UnknownDetector as exc:
            raise ConfigError(f"config error: {where}.type: {exc.args[0]}") from None
        except ValidationError as exc:
            raise ConfigError(_one_line(exc, prefix=f"{where}.params")) from None
        except Exception as exc:  # a plug-in that fails to import
            raise ConfigError(f"config error: {where}.type: {spec.type!r} cannot be loaded ({exc})") from None


def _one_line(exc: ValidationError, prefix: str = "") -> str:
    err = exc.errors()[0]
    key = prefix
    for part in err["loc"]:
        key += f"[{part}]" if isinstance(part, int) else f".{part}" if key else str(part)
    key = key or "(root)"
    value = err.get("input")
    shown = "" if isinstance(value, dict) else f" (got {value!r})"
    more = f" [+{exc.error_count() - 1} more]" if exc.error_count() > 1 else ""
    return f"config error: {key}: {err['msg']}{shown}{more}"
