"""Build the operator console from settings: users, authenticator, topics, Kafka feed, web app.

`create_console(settings)` is what `trainguard ui` calls; the CLI only adds
serving (the site, signals, `--timeout`). Anything that keeps the console
from starting is a `ConsoleRefused` with one line naming it.
"""

from __future__ import annotations

from typing import Protocol

from aiohttp import web
from kafka.errors import KafkaError

from trainguard.actions.settings import ActionSettings
from trainguard.schemas.keys import SecuritySettings
from trainguard.schemas.signing import KeyFileError
from trainguard.schemas.topics import Topics
from trainguard.streams.admin import ensure_configured_topics
from trainguard.streams.console.app import AssetsMissing, create_app
from trainguard.streams.console.auth import Authenticator, CredentialsError, load_users
from trainguard.streams.console.feed import READ, ConsoleFeed
from trainguard.streams.console.settings import ConsoleSettings
from trainguard.streams.console.state import ConsoleState
from trainguard.streams.settings import KafkaConfig


class ConsoleConfig(KafkaConfig, Protocol):
    """The sections the console reads (`trainguard.settings.Settings` satisfies it)."""

    @property
    def console(self) -> ConsoleSettings: ...

    @property
    def actions(self) -> ActionSettings: ...

    @property
    def security(self) -> SecuritySettings: ...


class ConsoleRefused(RuntimeError):
    """A one-line reason the console cannot start."""


def create_console(settings: ConsoleConfig, cfg: ConsoleSettings | None = None) -> web.Application:
    """The console's web app over the configured topics (`cfg` overrides `settings.console`).

    Checks, in order: the credentials file, that someone can log in at all, the
    broker (creating missing topics), the console's signing key, the browser assets.
    """
    cfg = settings.console if cfg is None else cfg
    try:
        users = load_users(cfg.credentials_file) if cfg.credentials_file else []
    except CredentialsError as exc:
        raise ConsoleRefused(str(exc)) from None
    auth = Authenticator(users, user_header=cfg.trusted_user_header, groups_header=cfg.trusted_groups_header,
                         operator_groups=cfg.operator_groups)
    if not auth.configured:
        raise ConsoleRefused("no way to log in: set console.credentials_file (or --credentials) or "
                             "console.trusted_user_header")
    try:
        # only the topics the console reads and writes: a console principal may describe nothing else
        ensure_configured_topics(settings, [Topics(settings.topics.prefix).name(t) for t in READ])
    except KafkaError as exc:
        raise ConsoleRefused(f"broker {settings.broker.servers} unreachable: {exc}") from None
    try:  # no default key: a console that could not sign would send commands act must refuse
        signer = settings.security.signer("console")
    except KeyFileError as exc:
        raise ConsoleRefused(str(exc)) from None
    feed = ConsoleFeed(settings.broker, Topics(settings.topics.prefix),
                       ConsoleState(standby_nodes=list(settings.actions.standby_nodes)), signer=signer,
                       command_ttl_s=settings.security.command_ttl_s)
    try:
        return create_app(feed, auth, cfg)
    except AssetsMissing as exc:
        raise ConsoleRefused(str(exc)) from None
