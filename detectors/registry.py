"""Find detector classes through the `trainguard.detectors` entry points.

Built-ins register exactly like third-party plug-ins (see pyproject.toml), so
a user's package that declares an entry point in that group is picked up
without touching trainguard. Resolution happens only when asked, never at
import time.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

from detectors.base import Detector

GROUP = "trainguard.detectors"


class UnknownDetector(KeyError):
    """A configured detector type is not registered."""


def available() -> dict[str, str]:
    """Registered detector types -> 'module:Class' (not imported)."""
    return {ep.name: ep.value for ep in entry_points(group=GROUP)}


def load(type_name: str) -> type[Detector]:
    """Import and return the detector class registered as `type_name`."""
    for ep in entry_points(group=GROUP):
        if ep.name == type_name:
            cls = ep.load()
            if not (isinstance(cls, type) and issubclass(cls, Detector)):
                raise TypeError(f"entry point {type_name!r} ({ep.value}) is not a Detector subclass")
            return cls
    known = ", ".join(sorted(available())) or "none"
    raise UnknownDetector(f"no detector type {type_name!r} is registered (known: {known})")


def build(type_name: str, instance: str, params: dict[str, Any]) -> Detector:
    """Construct one configured detector instance."""
    cls = load(type_name)
    try:
        return cls(instance=instance, **params)
    except TypeError as exc:
        raise TypeError(f"detector {instance!r} ({type_name}): bad parameters: {exc}") from None
