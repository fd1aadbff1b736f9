"""Who is asking, and may they: tokens from a file, basic auth, a trusted ingress header; CSRF.

Roles: a *viewer* sees every page and API; an *operator* may also act. Ways
in, in the order tried:

1. `Authorization: Bearer <token>`: for scripts. Not sent by browsers on
   their own, so these requests need no CSRF token.
2. `Authorization: Basic name:token`: the same users, for tools that only
   speak basic auth. Browsers replay it on their own, so CSRF applies.
3. The `tg_session` cookie the login form sets (HttpOnly, SameSite=Strict),
   holding the token itself: stateless, so any replica accepts it.
4. Behind an OIDC ingress, `trusted_user_header` names the user and
   `trusted_groups_header` their groups; members of `operator_groups` act.
   Only trusted when configured: then the console must be reachable only
   through that ingress.

Tokens are stored as SHA-256 digests (they are long random secrets, so a
plain digest is enough; human passwords belong behind the OIDC ingress).
CSRF is a double-submit token: the `tg_csrf` cookie (readable by the page's
script, which no other site can read) must equal the `X-CSRF-Token` header.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec
import yaml

Role = Literal["viewer", "operator"]
SESSION_COOKIE = "tg_session"
CSRF_COOKIE = "tg_csrf"
CSRF_HEADER = "X-CSRF-Token"


class CredentialsError(ValueError):
    """The credentials file is missing or malformed (one line, names the file)."""


class User(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One entry of the credentials file."""

    name: str
    role: Role
    token_sha256: str = ""
    token: str = ""


@dataclass(frozen=True)
class Identity:
    """An authenticated caller: who, with what role, and how they proved it."""

    name: str
    role: Role
    via: Literal["bearer", "basic", "cookie", "header"]

    @property
    def can_act(self) -> bool:
        """Operators act; viewers only look."""
        return self.role == "operator"

    @property
    def needs_csrf(self) -> bool:
        """Everything a browser attaches by itself needs the CSRF token; a bearer token does not."""
        return self.via != "bearer"


def digest(token: str) -> str:
    """The SHA-256 hex digest stored for a token."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A fresh random token (for the demo, or for an admin writing the file)."""
    return secrets.token_urlsafe(24)


def load_users(path: Path) -> list[User]:
    """Read a credentials file: a YAML list (or `users:` mapping) of name, role, token_sha256|token."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise CredentialsError(f"console.credentials_file {path}: {exc}".replace("\n", " ")) from None
    entries = raw.get("users") if isinstance(raw, dict) else raw
    try:
        users = msgspec.convert(entries or [], list[User])
    except msgspec.ValidationError as exc:
        raise CredentialsError(f"console.credentials_file {path}: {exc}") from None
    for user in users:
        if not (user.token_sha256 or user.token):
            raise CredentialsError(f"console.credentials_file {path}: user {user.name} has no token_sha256 or token")
    return users


class Authenticator:
    """Turns a request's headers and cookies into an `Identity`, or None."""

    def __init__(self, users: list[User], *, user_header: str = "", groups_header: str = "",
                 operator_groups: list[str] | None = None) -> None:
        self._by_digest = {(u.token_sha256 or digest(u.token)).lower(): u for u in users}
        self.user_header = user_header
        self.groups_header = groups_header
        self.operator_groups = set(operator_groups or [])

    @property
    def configured(self) -> bool:
        """False when nobody could ever log in (the server refuses to start then)."""
        return bool(self._by_digest) or bool(self.user_header)

    def by_token(self, token: str, via: Literal["bearer", "basic", "cookie"] = "bearer") -> Identity | None:
        """The user holding `token`, compared in constant time."""
        wanted = digest(token)
        for known, user in self._by_digest.items():
            if hmac.compare_digest(known, wanted):
                return Identity(user.name, user.role, via)
        return None

    def identify(self, headers: Mapping[str, str], cookies: Mapping[str, str]) -> Identity | None:
        """The caller, from the first way in that their request uses."""
        auth = headers.get("Authorization", "")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value:
            return self.by_token(value.strip(), "bearer")
        if scheme.lower() == "basic" and value:
            return self._basic(value.strip())
        if cookies.get(SESSION_COOKIE):
            return self.by_token(cookies[SESSION_COOKIE], "cookie")
        if self.user_header and headers.get(self.user_header):
            sent = headers.get(self.groups_header, "") if self.groups_header else ""
            groups = {g.strip() for g in sent.split(",")} if self.groups_header else set()
            role: Role = "operator" if groups & self.operator_groups else "viewer"
            return Identity(headers[self.user_header].strip(), role, "header")
        return None

    def _basic(self, value: str) -> Identity | None:
        try:
            name, _, token = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        who = self.by_token(token, "basic")
        return who if who is not None and hmac.compare_digest(who.name, name) else None


def csrf_ok(headers: Mapping[str, str], cookies: Mapping[str, str]) -> bool:
    """Double-submit check: the header equals the cookie, both present."""
    sent, kept = headers.get(CSRF_HEADER, ""), cookies.get(CSRF_COOKIE, "")
    return bool(sent) and bool(kept) and hmac.compare_digest(sent, kept)


DEFAULT_PORTS = {"http": 80, "https": 443}


def normal_origin(origin: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin or URL, the port made explicit; None if it is not http(s).

    >>> normal_origin("HTTPS://Console.example"), normal_origin("http://h:8765/x"), normal_origin("null")
    (('https', 'console.example', 443), ('http', 'h', 8765), None)
    """
    scheme, sep, rest = origin.strip().partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in DEFAULT_PORTS:
        return None
    netloc = rest.split("/", 1)[0].lower()
    host, colon, port = netloc.rpartition(":") if not netloc.endswith("]") else (netloc, "", "")
    if not colon:
        host, port = netloc, ""
    try:
        return scheme, host, int(port) if port else DEFAULT_PORTS[scheme]
    except ValueError:
        return None


def same_origin(headers: Mapping[str, str], expected: str) -> bool:
    """A browser's Origin, when it sends one, must be this console: same scheme, host and port.

    `expected` is the console's own origin (`scheme://host[:port]`): an
    `https://` page on the same host name is another origin than an http console.
    """
    origin = headers.get("Origin", "")
    return not origin or (normal_origin(origin) is not None and normal_origin(origin) == normal_origin(expected))
