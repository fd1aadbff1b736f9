"""Find detector classes through the `trainguard.detectors` entry points.

Built-ins register exactly like third-party plug-ins (see pyproject.toml), so
a user's package that declares an entry point in that group is picked up
without touching trainguard. Resolution happens only when asked, never at
import time.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Iterable
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model

from trainguard.detectors.base import Detector
from trainguard.detectors.dispatch import handlers

GROUP = "trainguard.detectors"


class UnknownDetector(KeyError):
    """A configured detector type is not registered."""


def available() -> dict[str, str]:
    """Registered detector types -> 'module:Class' (not imported)."""
    return {ep.name: ep.value for ep in entry_points(group=GROUP)}


def load(type_name: str, eps: Iterable[EntryPoint] | None = None) -> type[Detector]:
    """Import and return the detector class registered as `type_name` (`eps`: a scan already made)."""
    for ep in entry_points(group=GROUP) if eps is None else eps:
        if ep.name == type_name:
            cls = ep.load()
            if not (isinstance(cls, type) and issubclass(cls, Detector)):
                raise TypeError(f"entry point {type_name!r} ({ep.value}) is not a Detector subclass")
            handlers(cls)  # HandlerError now, at registration, for declarations no pipeline could route
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


@cache  # a pure function of the class: building the model is the slow part of loading a config
def params_model(cls: type[Detector]) -> type[BaseModel]:
    """A strict pydantic model of a detector's parameters, derived from its `__init__` signature.

    Every parameter but `instance` becomes a field typed by its annotation and
    defaulted as in the signature, so a detector declares its parameters once,
    in plain Python, and a typo or a wrong type in the config still fails at
    load time. A detector taking `**kwargs` accepts extra names.
    """
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # an annotation that cannot be resolved: check that parameter's name only
        hints = {}
    fields: dict[str, Any] = {}
    extra = "forbid"
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            extra = "allow"
        if name in ("self", "instance") or p.kind in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL):
            continue
        fields[name] = (hints.get(name, Any), ... if p.default is inspect.Parameter.empty else p.default)
    config = ConfigDict(extra=extra, arbitrary_types_allowed=True)  # type: ignore[typeddict-item]
    return create_model(f"{cls.__name__}Params", __config__=config, **fields)


def validate_params(type_name: str, params: dict[str, Any], eps: Iterable[EntryPoint] | None = None) -> dict[str, Any]:
    """`params` checked and converted against the detector's signature (raises pydantic's ValidationError)."""
    model = params_model(load(type_name, eps)).model_validate(params)
    extra = model.model_extra or {}
    return {**{name: getattr(model, name) for name in model.model_fields_set if name not in extra}, **extra}
