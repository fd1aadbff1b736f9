"""streams.console.auth: who may see and who may act."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from trainguard.streams.console.auth import (
    Authenticator,
    CredentialsError,
    User,
    csrf_ok,
    digest,
    load_users,
    same_origin,
)

USERS = [User(name="alice", role="operator", token_sha256=digest("op-secret")),
         User(name="victor", role="viewer", token="view-secret")]


def basic(user: str, token: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()}


def test_tokens_basic_and_cookie_identify_users_with_their_roles() -> None:
    auth = Authenticator(USERS)
    who = auth.identify({"Authorization": "Bearer op-secret"}, {})
    assert who is not None and who.name == "alice" and who.can_act and not who.needs_csrf
    viewer = auth.identify(basic("victor", "view-secret"), {})
    assert viewer is not None and not viewer.can_act and viewer.needs_csrf
    assert auth.identify(basic("alice", "view-secret"), {}) is None  # a token is bound to its user
    cookie = auth.identify({}, {"tg_session": "op-secret"})
    assert cookie is not None and cookie.via == "cookie" and cookie.needs_csrf
    assert auth.identify({"Authorization": "Bearer wrong"}, {}) is None
    assert auth.identify({"Authorization": "Basic !!notbase64"}, {}) is None
    assert auth.identify({}, {}) is None


def test_ingress_headers_count_only_when_configured() -> None:
    headers = {"X-Forwarded-User": "carol", "X-Forwarded-Groups": "sre, trainguard-operators"}
    assert Authenticator(USERS).identify(headers, {}) is None
    auth = Authenticator([], user_header="X-Forwarded-User", groups_header="X-Forwarded-Groups",
                         operator_groups=["trainguard-operators"])
    who = auth.identify(headers, {})
    assert who is not None and who.name == "carol" and who.can_act and who.via == "header"
    viewer = auth.identify({"X-Forwarded-User": "dan", "X-Forwarded-Groups": "sre"}, {})
    assert viewer is not None and viewer.role == "viewer"
    assert not Authenticator([]).configured and auth.configured


def test_csrf_needs_the_header_to_match_the_cookie() -> None:
    assert csrf_ok({"X-CSRF-Token": "abc"}, {"tg_csrf": "abc"})
    assert not csrf_ok({"X-CSRF-Token": "abc"}, {"tg_csrf": "abd"})
    assert not csrf_ok({}, {"tg_csrf": "abc"}) and not csrf_ok({"X-CSRF-Token": ""}, {"tg_csrf": ""})
    assert same_origin({"Origin": "http://h:1"}, "http://h:1") and not same_origin({"Origin": "https://evil"}, "http://h:1")
    assert same_origin({}, "http://h:1")


def test_origin_is_matched_by_scheme_host_and_port() -> None:
    console = "http://console.example:8765"
    assert not same_origin({"Origin": "https://console.example:8765"}, console)  # another scheme: another origin
    assert not same_origin({"Origin": "http://console.example:8766"}, console)
    assert not same_origin({"Origin": "http://console.example.evil:8765"}, console)
    assert not same_origin({"Origin": "null"}, console) and not same_origin({"Origin": "console.example:8765"}, console)
    assert same_origin({"Origin": "HTTP://Console.Example:8765"}, console)
    assert same_origin({"Origin": "https://c.example"}, "https://c.example:443")  # the default port made explicit
    assert not same_origin({"Origin": "http://c.example"}, "https://c.example")


def test_credentials_file_errors_are_one_line(tmp_path: Path) -> None:
    good = tmp_path / "users.yaml"
    good.write_text("users:\n  - {name: a, role: operator, token: t}\n")
    assert load_users(good)[0].name == "a"
    for text in ("users:\n  - {name: a, role: admin, token: t}\n", "- {name: a, role: viewer}\n", "users: [\n"):
        good.write_text(text)
        with pytest.raises(CredentialsError) as err:
            load_users(good)
        assert "\n" not in str(err.value) and str(good) in str(err.value)
    with pytest.raises(CredentialsError):
        load_users(tmp_path / "missing.yaml")
