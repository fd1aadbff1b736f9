"""The console's JSON API over the real broker: auth, roles, CSRF, operator commands, live events."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from kafka import KafkaProducer

from tests.integration.streams.console.console_kit import OP, VIEW, console_key, read, read_raw, with_console
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import AuditEntry, Incident, OperatorCommand
from trainguard.schemas.signing import KeyRing
from trainguard.schemas.topics import Topics, key_for
from trainguard.streams.console.auth import Authenticator
from trainguard.streams.console.settings import ConsoleSettings

pytestmark = pytest.mark.broker


def test_no_action_without_an_operator_and_csrf(kafka: str, topic_prefix: str) -> None:
    async def body(c: TestClient[Any, Any]) -> None:
        assert (await c.get("/api/fleet")).status == 401
        assert await (await c.get("/api/me")).json() == {"authenticated": False}
        assert (await c.post("/api/breaker/reset")).status == 401
        assert (await c.post("/api/breaker/reset", headers=VIEW)).status == 403
        assert (await c.post("/api/breaker/reset", auth=None, headers={"Authorization": "Basic YWxpY2U6b3A="})).status == 403
        assert (await c.post("/api/login", json={"token": "nope"})).status == 401
        login = await c.post("/api/login", json={"token": "op"})
        assert login.status == 200 and (await login.json())["name"] == "alice"
        assert (await c.post("/api/breaker/reset")).status == 403  # cookie alone: no CSRF header
        csrf = c.session.cookie_jar.filter_cookies(c.make_url("/"))["tg_csrf"].value
        assert (await c.post("/api/breaker/reset", headers={"X-CSRF-Token": csrf, "Origin": "http://evil.example"})).status == 403
        ok = await c.post("/api/breaker/reset", headers={"X-CSRF-Token": csrf}, json={"reason": "switch fixed"})
        assert ok.status == 202
        assert (await c.post("/api/decisions/unknown/approve", headers=OP)).status == 404
        assert (await c.post("/api/standby/n9/return", headers=OP)).status == 409

    key = console_key()
    with_console(kafka, topic_prefix, body, signer=key)
    raw = read_raw(kafka, topic_prefix + "operator", 1)
    commands = [r for r in (Codec().decode(m.value) for m in raw) if isinstance(r, OperatorCommand)]
    assert len(commands) == 1 and commands[0].operator == "alice" and commands[0].verb == "reset_breaker"
    assert commands[0].reason == "switch fixed"
    # signed with the console's key over the exact bytes, and expiring (what act verifies)
    ring = KeyRing({"console": key.private_key.public_key()})
    assert ring.check(raw[0].value, [(k, bytes(v)) for k, v in raw[0].headers]) == ("console", "")
    assert 0 < commands[0].expires - commands[0].ts <= 120
    audit = [r for r in read(kafka, topic_prefix + "audit", 1) if isinstance(r, AuditEntry)]
    assert audit[0].event == "console_reset_breaker" and audit[0].actor == "alice"
    assert audit[0].detail["command"] == commands[0].id and audit[0].detail["via"] == "cookie"


def test_views_and_live_events(kafka: str, topic_prefix: str) -> None:
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    inc = Incident(ts=time.time(), id="inc-live", kind="nan", job="j", onset=time.time(), detected_at=time.time(),
                   evidence={"loss": "nan"})

    async def body(c: TestClient[Any, Any]) -> None:
        events = await c.get("/api/events", headers=VIEW)
        assert events.status == 200 and events.headers["Content-Type"].startswith("text/event-stream")
        assert await events.content.readline() == b": connected\n"
        producer.send(Topics(topic_prefix).for_record(inc), key=key_for(inc), value=Codec().encode(inc))
        producer.flush()
        seen = b""
        async with asyncio.timeout(15):
            while b"inc-live" not in seen:
                seen += await events.content.readline()
        assert b"event: incident" in seen
        events.close()
        detail = await (await c.get("/api/incidents/inc-live", headers=VIEW)).json()
        assert detail["incident"]["evidence"] == {"loss": "nan"} and detail["decision"] is None
        page = await (await c.get("/api/incidents?limit=1", headers=VIEW)).json()
        assert page["total"] == 1 and page["items"][0]["id"] == "inc-live"
        assert (await c.get("/api/incidents?limit=x", headers=VIEW)).status == 400
        assert (await c.get("/api/jobs/j", headers=VIEW)).status == 200
        routes = await (await c.get("/api", headers=VIEW)).json()
        assert any(r["method"] == "POST" and r["path"] == "/api/breaker/reset" and r["doc"] for r in routes)

    with_console(kafka, topic_prefix, body)
    producer.close()


def test_behind_an_oidc_ingress_the_header_names_the_operator(kafka: str, topic_prefix: str) -> None:
    auth = Authenticator([], user_header="X-Forwarded-User", groups_header="X-Forwarded-Groups",
                         operator_groups=["sre-oncall"])
    carol = {"X-Forwarded-User": "carol", "X-Forwarded-Groups": "staff,sre-oncall"}

    async def body(c: TestClient[Any, Any]) -> None:
        me = await c.get("/api/me", headers=carol)
        assert (await me.json())["name"] == "carol" and (await me.json())["can_act"] is True
        csrf = c.session.cookie_jar.filter_cookies(c.make_url("/"))["tg_csrf"].value
        assert (await c.post("/api/breaker/reset", headers=carol)).status == 403  # the ingress header is not CSRF-proof
        assert (await c.post("/api/breaker/reset", headers={**carol, "X-CSRF-Token": csrf})).status == 202
        dave = {"X-Forwarded-User": "dave", "X-Forwarded-Groups": "staff", "X-CSRF-Token": csrf}
        assert (await c.post("/api/breaker/reset", headers=dave)).status == 403
        assert (await c.get("/api/fleet", headers={"X-Forwarded-Groups": "sre-oncall"})).status == 401

    with_console(kafka, topic_prefix, body, auth)
    commands = [r for r in read(kafka, topic_prefix + "operator", 1) if isinstance(r, OperatorCommand)]
    assert [c.operator for c in commands] == ["carol"]


def test_a_console_without_its_key_refuses_to_act_and_publishes_nothing(kafka: str, topic_prefix: str) -> None:
    async def body(c: TestClient[Any, Any]) -> None:
        refused = await c.post("/api/breaker/reset", headers=OP)
        assert refused.status == 503 and "signing key" in (await refused.json())["error"]
        assert (await c.get("/api/fleet", headers=VIEW)).status == 200  # it still shows the fleet

    with_console(kafka, topic_prefix, body, unsigned=True)
    assert read(kafka, topic_prefix + "operator", 1, timeout_s=3) == []
    assert read(kafka, topic_prefix + "audit", 1, timeout_s=3) == []


def test_malformed_or_deeply_nested_bodies_get_400_without_a_traceback(kafka: str, topic_prefix: str,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    async def body(c: TestClient[Any, Any]) -> None:
        for sent in (b"{not json", b"\xff\xfe", b"[1, 2]", b'"text"', b"[" * 200000 + b"]" * 200000,
                     b'{"reason": ' + b'{"a": ' * 40 + b"1" + b"}" * 40 + b"}"):
            for path in ("/api/breaker/reset", "/api/login"):
                resp = await c.post(path, data=sent, headers={**OP, "Content-Type": "application/json"})
                assert resp.status == 400, (path, sent[:20], resp.status)
                assert "error" in await resp.json()
        fine = await c.post("/api/breaker/reset", headers=OP, json={"reason": {"a": {"b": "shallow is fine"}}})
        assert fine.status == 202

    with caplog.at_level("DEBUG"):
        with_console(kafka, topic_prefix, body)
    # Only the console's own loggers and aiohttp's: an unretrieved future of a producer that an
    # earlier test in the same process leaked can be logged by asyncio in the middle of this one.
    ours = [r for r in caplog.records if r.name.startswith(("aiohttp", "trainguard.streams.console"))]
    assert not [r for r in ours if r.exc_info or "Traceback" in r.getMessage()]
    commands = [r for r in read(kafka, topic_prefix + "operator", 1) if isinstance(r, OperatorCommand)]
    assert len(commands) == 1  # none of the bad bodies sent anything


def test_origin_must_match_scheme_host_and_port(kafka: str, topic_prefix: str) -> None:
    async def body(c: TestClient[Any, Any]) -> None:
        login = await c.post("/api/login", json={"token": "op"})
        assert login.status == 200
        csrf = c.session.cookie_jar.filter_cookies(c.make_url("/"))["tg_csrf"].value
        here = f"http://{c.host}:{c.port}"
        for origin in (f"https://{c.host}:{c.port}", f"http://{c.host}:{c.port + 1}", "null"):
            refused = await c.post("/api/breaker/reset", headers={"X-CSRF-Token": csrf, "Origin": origin})
            assert refused.status == 403, origin
            assert (await c.post("/api/login", json={"token": "op"}, headers={"Origin": origin})).status == 403
        assert (await c.post("/api/breaker/reset", headers={"X-CSRF-Token": csrf, "Origin": here})).status == 202

    with_console(kafka, topic_prefix, body)


def test_behind_a_tls_ingress_the_configured_origin_is_the_one(kafka: str, topic_prefix: str) -> None:
    async def body(c: TestClient[Any, Any]) -> None:
        await c.post("/api/login", json={"token": "op"}, headers={"Origin": "https://console.example"})
        csrf = c.session.cookie_jar.filter_cookies(c.make_url("/"))["tg_csrf"].value
        plain = f"http://{c.host}:{c.port}"
        assert (await c.post("/api/breaker/reset", headers={"X-CSRF-Token": csrf, "Origin": plain})).status == 403
        ok = await c.post("/api/breaker/reset", headers={"X-CSRF-Token": csrf, "Origin": "https://console.example"})
        assert ok.status == 202

    with_console(kafka, topic_prefix, body, cfg=ConsoleSettings(public_origin="https://console.example"))


def test_event_streams_are_capped_per_principal_and_freed_on_close(kafka: str, topic_prefix: str) -> None:
    async def body(c: TestClient[Any, Any]) -> None:
        held = [await c.get("/api/events", headers=VIEW) for _ in range(2)]
        assert [r.status for r in held] == [200, 200]
        over = await c.get("/api/events", headers=VIEW)
        assert over.status == 429 and "max_streams_per_user" in (await over.json())["error"]
        other = await c.get("/api/events", headers=OP)  # another principal has its own allowance
        assert other.status == 200
        other.close()
        held[0].close()
        async with asyncio.timeout(20):  # the server notices the closed stream at its next write
            while (again := await c.get("/api/events", headers=VIEW)).status == 429:
                await asyncio.sleep(0.2)
        assert again.status == 200
        again.close()
        held[1].close()

    with_console(kafka, topic_prefix, body, cfg=ConsoleSettings(max_streams_per_user=2))


def test_every_response_carries_csp_nosniff_and_referrer_policy(kafka: str, topic_prefix: str) -> None:
    async def body(c: TestClient[Any, Any]) -> None:
        responses = [await c.get("/"), await c.get("/static/app.js"), await c.get("/api/fleet", headers=VIEW),
                     await c.get("/api/fleet"), await c.get("/api/events", headers=VIEW),
                     await c.post("/api/login", data=b"{bad", headers={"Content-Type": "application/json"})]
        for resp in responses:
            assert "script-src 'self'" in resp.headers["Content-Security-Policy"], resp.url
            assert "frame-ancestors 'none'" in resp.headers["Content-Security-Policy"]
            assert resp.headers["X-Content-Type-Options"] == "nosniff"
            assert resp.headers["Referrer-Policy"] == "no-referrer"
            resp.close()

    with_console(kafka, topic_prefix, body)


def test_rollout_is_shown_in_controls_and_changed_only_by_an_operator_with_a_valid_mode(
        kafka: str, topic_prefix: str) -> None:
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    shown = AuditEntry(ts=time.time(), event="rails_state", subject_id="rails", actor="trainguard-act",
                       detail={"breaker": {"tripped": False, "reason": ""}, "pool": {"spares": [], "swaps": {}},
                               "approval_kinds": ["network"], "evicted": {},
                               "rollout": {"default": "observe", "kinds": {"hw_fault": "auto", "network": "auto"},
                                           "rules": {}}})

    async def body(c: TestClient[Any, Any]) -> None:
        producer.send(Topics(topic_prefix).name("audit"), key=b"rails", value=Codec().encode(shown))
        producer.flush()
        rollout: dict[str, Any] = {}
        async with asyncio.timeout(15):
            while not rollout.get("known"):
                rollout = (await (await c.get("/api/controls", headers=VIEW)).json())["rollout"]
                await asyncio.sleep(0.1)
        kinds = {k["kind"]: k["mode"] for k in rollout["kinds"]}
        assert rollout["default"] == "observe" and kinds["hw_fault"] == "auto" and kinds["hang"] == "observe"
        assert kinds["network"] == "approve"  # promoted, but an approval kind: it goes no further
        assert (await c.post("/api/rollout", headers=VIEW, json={"subject": "kind:network", "mode": "auto"})).status == 403
        for bad in ({"subject": "kind:network", "mode": "yolo"}, {"subject": "network", "mode": "auto"}, {}):
            refused = await c.post("/api/rollout", headers=OP, json=bad)
            assert refused.status == 400 and "Traceback" not in await refused.text()
        ok = await c.post("/api/rollout", headers=OP, json={"subject": "kind:network", "mode": "auto",
                                                           "reason": "a quiet week"})
        assert ok.status == 202

    with_console(kafka, topic_prefix, body)
    producer.close()
    commands = [r for r in read(kafka, topic_prefix + "operator", 1) if isinstance(r, OperatorCommand)]
    assert [(c.verb, c.subject_id, c.mode, c.operator) for c in commands] == [
        ("set_rollout", "kind:network", "auto", "alice")]
