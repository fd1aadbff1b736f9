"""How every trainguard process reaches Kafka: the `broker:` and `topics:` sections, and the one
function that turns them into client options.

Every Kafka client in trainguard (kafka-python in the collectors, agents and
act; aiokafka in the worker's fast path; Faust for the worker app) is built
with `**client_options(settings.broker, flavour)`, so TLS, mutual TLS, SASL
PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER are configured once, here, and
identically for all of them. It lives in `schemas` because both collectors
and streams build clients; the client libraries themselves are imported only
inside `client_options`, for the flavour asked for.

Secrets never sit in the YAML: a password or token is named by a file or an
environment variable (`password_file`, `password_env`), read when a client is
built, and never stored in the settings object, so printing or logging the
settings cannot leak them. `client_properties` passes rarer options straight
to the clients, but refuses anything that looks like a secret.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Flavour = Literal["kafka-python", "aiokafka", "faust"]
_SECRET_WORDS = ("password", "secret", "token", "credential", "sasl_jaas")


class SecretError(ValueError):
    """A configured secret cannot be read; the message names where it was looked for, never its value."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SecretSource(_Strict):
    """Where a secret is read from: a file (a mounted Kubernetes Secret) or an environment variable."""

    file: Path | None = None
    env: str = ""

    @model_validator(mode="after")
    def _one_source(self) -> SecretSource:
        if (self.file is None) == (not self.env):
            raise ValueError("give exactly one of file or env")
        return self

    def read(self, what: str) -> str:
        """The secret's value (stripped of surrounding whitespace)."""
        if self.file is not None:
            try:
                return self.file.read_text().strip()
            except OSError as exc:
                raise SecretError(f"{what}: cannot read {self.file} ({exc.strerror})") from None
        value = os.environ.get(self.env)
        if not value:
            raise SecretError(f"{what}: environment variable {self.env} is not set")
        return value.strip()


class TlsSettings(_Strict):
    """Server verification (always on under SSL/SASL_SSL) and, with a client certificate, mutual TLS."""

    ca_file: Path | None = Field(None, description="CA bundle that signed the brokers' certificates; "
                                 "empty means the system's trusted CAs (Confluent Cloud, MSK)")
    cert_file: Path | None = Field(None, description="client certificate (PEM) for mutual TLS")
    key_file: Path | None = Field(None, description="its private key (PEM)")
    key_password: SecretSource | None = Field(None, description="the key's passphrase, if it has one")
    check_hostname: bool = Field(True, description="check the broker's name against its certificate")

    @model_validator(mode="after")
    def _pair(self) -> TlsSettings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (mutual TLS)")
        return self


class OAuthSettings(_Strict):
    """Where an OAUTHBEARER token comes from; read afresh on every authentication."""

    token: SecretSource | None = Field(None, description="a file (refreshed by a sidecar) or env var "
                                       "holding the current token")
    token_command: list[str] = Field(default_factory=list, description="argv printing a fresh token, e.g. "
                                     "an MSK IAM signer or an OIDC client-credentials helper")

    @model_validator(mode="after")
    def _one_source(self) -> OAuthSettings:
        if (self.token is None) == (not self.token_command):
            raise ValueError("give exactly one of token or token_command")
        return self

    def fetch(self) -> str:
        """A current token."""
        if self.token is not None:
            return self.token.read("broker.sasl.oauth.token")
        try:
            done = subprocess.run(self.token_command, capture_output=True, text=True, timeout=30, check=True)
        except (OSError, subprocess.SubprocessError) as exc:
            raise SecretError(f"broker.sasl.oauth.token_command failed ({type(exc).__name__})") from None
        return done.stdout.strip()


class SaslSettings(_Strict):
    """SASL authentication: PLAIN, SCRAM-SHA-256/512 (username + password) or OAUTHBEARER."""

    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
    username: str = ""
    password: SecretSource | None = None
    oauth: OAuthSettings | None = None

    @model_validator(mode="after")
    def _complete(self) -> SaslSettings:
        if self.mechanism == "OAUTHBEARER":
            if self.oauth is None:
                raise ValueError("OAUTHBEARER needs oauth: {token: ...} or {token_command: [...]}")
        elif not self.username or self.password is None:
            raise ValueError(f"{self.mechanism} needs username and password: {{file: ...}} or {{env: ...}}")
        return self


class BrokerSettings(_Strict):
    """The Kafka cluster to talk to (and how), and the local broker `trainguard broker` runs."""

    bootstrap: str = Field("", description="host:port list; empty means the local broker")
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    tls: TlsSettings = Field(default_factory=TlsSettings)
    sasl: SaslSettings | None = None
    client_properties: dict[str, Any] = Field(default_factory=dict, description="passed to every kafka-python "
                                              "and aiokafka client as is (no secrets: those go in sasl/tls)")
    connect_timeout_s: float = Field(15.0, gt=0, description="how long a command waits for an unreachable broker "
                                     "before giving up with one line")
    host: str = "127.0.0.1"
    port: int = Field(9092, ge=1, le=65535)
    controller_port: int = Field(9093, ge=1, le=65535)
    data_dir: Path = Path(".trainguard/kafka")
    heap_mb: int = Field(512, ge=128)
    start_timeout_s: float = Field(90.0, gt=0)

    @property
    def servers(self) -> str:
        """The bootstrap servers clients use."""
        return self.bootstrap or f"{self.host}:{self.port}"

    @field_validator("client_properties")
    @classmethod
    def _no_secrets(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if any(word in key.lower() for word in _SECRET_WORDS):
                raise ValueError(f"{key}: secrets do not belong in client_properties; use sasl/tls with a file or env")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> BrokerSettings:
        uses_sasl = self.security_protocol.startswith("SASL_")
        if uses_sasl and self.sasl is None:
            raise ValueError(f"security_protocol {self.security_protocol} needs a sasl: section")
        if not uses_sasl and self.sasl is not None:
            raise ValueError(f"sasl: is set but security_protocol is {self.security_protocol} (use SASL_SSL)")
        return self


class TopicSettings(_Strict):
    """Topic naming and layout."""

    prefix: str = "tg."
    partitions: int = Field(4, ge=1)
    replication: int = Field(1, ge=1)


def broker_environment(broker: BrokerSettings) -> dict[str, str]:
    """The TRAINGUARD_BROKER__* variables that reproduce `broker` (what the agent hands the training hook).

    Only paths and names travel, never a secret's value: a password stays in its file.
    """
    out = {"TRAINGUARD_BROKER__BOOTSTRAP": broker.servers}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and not prefix.endswith("CLIENT_PROPERTIES"):
            for key, item in value.items():
                walk(f"{prefix}__{key.upper()}", item)
        elif value is not None:
            out[prefix] = json.dumps(value) if isinstance(value, (dict, list)) else str(value)

    dumped = broker.model_dump(mode="json", exclude_defaults=True, include={"security_protocol", "tls", "sasl",
                                                                             "client_properties"})
    walk("TRAINGUARD_BROKER", dumped)
    return out


def broker_from_environment() -> BrokerSettings:
    """The `broker:` section from TRAINGUARD_BROKER__* variables alone, parsed as the config loader does.

    For the one process that reads no config file: the training hook, which
    inherits the agent's environment.
    """
    from pydantic_settings import BaseSettings, SettingsConfigDict

    class FromEnv(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="TRAINGUARD_", env_nested_delimiter="__", extra="ignore")
        broker: BrokerSettings = Field(default_factory=BrokerSettings)

    return FromEnv().broker


def ssl_context(tls: TlsSettings) -> ssl.SSLContext:
    """A client TLS context that verifies the broker (and presents a client certificate if configured)."""
    context = ssl.create_default_context(cafile=str(tls.ca_file) if tls.ca_file else None)
    context.check_hostname = tls.check_hostname
    if tls.cert_file is not None and tls.key_file is not None:
        password = tls.key_password.read("broker.tls.key_password") if tls.key_password else None
        context.load_cert_chain(str(tls.cert_file), str(tls.key_file), password=password)
    return context


def client_options(broker: BrokerSettings, flavour: Flavour) -> dict[str, Any]:
    """Keyword arguments that make a client of `flavour` speak `broker`'s security protocol.

    kafka-python and aiokafka clients take them directly (`KafkaProducer(**opts)`);
    for Faust they are `{"broker_credentials": ...}` for `faust.App`. Plain text
    and no pass-through properties give `{}`, so the local broker needs nothing.
    """
    if flavour == "faust":
        return _faust_options(broker)
    opts: dict[str, Any] = {}
    if broker.security_protocol != "PLAINTEXT":
        opts["security_protocol"] = broker.security_protocol
    if broker.security_protocol in ("SSL", "SASL_SSL"):
        opts["ssl_context"] = ssl_context(broker.tls)
    sasl = broker.sasl
    if sasl is not None:
        opts["sasl_mechanism"] = sasl.mechanism
        if sasl.oauth is not None:
            opts["sasl_oauth_token_provider"] = _token_provider(sasl.oauth, flavour)
        else:
            assert sasl.password is not None  # checked by SaslSettings
            opts["sasl_plain_username"] = sasl.username
            opts["sasl_plain_password"] = sasl.password.read("broker.sasl.password")
    if flavour == "kafka-python":
        return {**broker.client_properties, **opts}
    return {**{k: v for k, v in broker.client_properties.items() if k in _AIOKAFKA_KEYS}, **opts}


# kafka-python accepts more settings than aiokafka; aiokafka rejects unknown keywords.
_AIOKAFKA_KEYS = frozenset({"client_id", "request_timeout_ms", "retry_backoff_ms", "metadata_max_age_ms",
                            "connections_max_idle_ms", "api_version", "ssl_context", "sasl_kerberos_service_name",
                            "sasl_kerberos_domain_name"})


def _token_provider(oauth: OAuthSettings, flavour: Flavour) -> Any:
    if flavour == "kafka-python":
        try:
            from kafka.net.sasl.oauth import AbstractTokenProvider as SyncProvider
        except ImportError:  # kafka-python 2.x
            from kafka.sasl.oauth import AbstractTokenProvider as SyncProvider  # type: ignore[no-redef]

        class SyncTokens(SyncProvider):  # type: ignore[misc]
            def token(self) -> str:
                return oauth.fetch()

        return SyncTokens()
    from aiokafka.abc import AbstractTokenProvider as AsyncProvider

    class AsyncTokens(AsyncProvider):  # type: ignore[misc]
        async def token(self) -> str:
            return oauth.fetch()

    return AsyncTokens()


def _faust_options(broker: BrokerSettings) -> dict[str, Any]:
    import faust

    protocol, sasl = broker.security_protocol, broker.sasl
    context = ssl_context(broker.tls) if protocol in ("SSL", "SASL_SSL") else None
    if sasl is None:
        return {"broker_credentials": faust.SSLCredentials(context)} if context is not None else {}
    if sasl.oauth is not None:
        return {"broker_credentials": faust.OAuthCredentials(oauth_cb=_token_provider(sasl.oauth, "aiokafka"),
                                                             ssl_context=context)}
    assert sasl.password is not None
    return {"broker_credentials": faust.SASLCredentials(username=sasl.username,
                                                        password=sasl.password.read("broker.sasl.password"),
                                                        ssl_context=context, mechanism=sasl.mechanism)}
