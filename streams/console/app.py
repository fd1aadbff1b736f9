"""The console's aiohttp application: page, JSON API, server-sent events, auth middleware.

aiohttp rather than FastAPI: it is already installed (Faust is built on it),
it is asyncio-native like aiokafka, and its streaming responses carry
server-sent events without another dependency. FastAPI would add an OpenAPI
page for free, but also pydantic-v2/starlette/uvicorn pins to a service that
has a dozen routes; `GET /api` lists them with their docstrings instead, and
docs/console.md documents each.

Hardening, each for a reason: every response carries a Content-Security-Policy
(scripts, styles and connections from this origin only: an injected string
cannot run), `X-Content-Type-Options: nosniff` and `Referrer-Policy:
no-referrer`; a request body that is not a JSON object, or is nested deeper
than `console.max_json_depth`, is a 400 (never a 500 with a traceback); an
`Origin` must match the console's scheme, host and port; one principal holds
at most `console.max_streams_per_user` live event streams.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web

from trainguard.actions.rollout import check_mode, parse_subject
from trainguard.actions.verdicts import check_value
from trainguard.schemas.records import AuditEntry, OperatorCommand
from trainguard.streams.console import report as reports
from trainguard.streams.console import views
from trainguard.streams.console.auth import CSRF_COOKIE, SESSION_COOKIE, Authenticator, Identity, csrf_ok, same_origin
from trainguard.streams.console.feed import ConsoleFeed
from trainguard.streams.console.settings import ConsoleSettings

STATIC = Path(__file__).parent / "static"
VENDOR = ("vendor/uPlot.iife.min.js", "vendor/uPlot.min.css")
PUBLIC = ("/", "/api/health", "/api/login", "/api/logout")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
FEED = web.AppKey("feed", ConsoleFeed)
AUTH = web.AppKey("auth", Authenticator)
CFG = web.AppKey("cfg", ConsoleSettings)
IDENTITY = web.RequestKey("identity", Identity)
STREAMS = web.AppKey("streams", dict)  # principal -> open event streams
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
                               "form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class BadBody(web.HTTPBadRequest):
    """A request body that is not a JSON object of bounded depth: a 400 with a one-line JSON error."""

    def __init__(self, message: str) -> None:
        super().__init__(text=json.dumps({"error": message}), content_type="application/json")


class AssetsMissing(RuntimeError):
    """The charting library was not installed (`make install` fetches it)."""


def check_assets(static: Path = STATIC) -> None:
    """Refuse to serve a page whose charts cannot load."""
    missing = [name for name in VENDOR if not (static / name).is_file()]
    if missing:
        raise AssetsMissing(f"console assets missing: {static / missing[0]} (run `make install`, which runs "
                            "tools/install_web_assets.sh to fetch uPlot from npm)")


def create_app(feed: ConsoleFeed, auth: Authenticator, cfg: ConsoleSettings, *,
               manage_feed: bool = True) -> web.Application:
    """The application; with `manage_feed` it starts and stops the Kafka feed with itself."""
    check_assets()
    app = web.Application(middlewares=[_guard])
    app[FEED], app[AUTH], app[CFG], app[STREAMS] = feed, auth, cfg, {}
    app.on_response_prepare.append(_security_headers)
    app.router.add_get("/", _index)
    app.router.add_static("/static/", STATIC)
    app.router.add_get("/api", _api_index)
    app.router.add_get("/api/health", health)
    app.router.add_post("/api/login", login)
    app.router.add_post("/api/logout", logout)
    app.router.add_get("/api/me", me)
    app.router.add_get("/api/fleet", fleet)
    app.router.add_get("/api/jobs", jobs)
    app.router.add_get("/api/jobs/{job}", job)
    app.router.add_get("/api/incidents", incidents)
    app.router.add_get("/api/incidents/{id}", incident)
    app.router.add_get("/api/controls", controls)
    app.router.add_get("/api/events", events)
    app.router.add_post("/api/decisions/{id}/approve", approve)
    app.router.add_post("/api/decisions/{id}/reject", reject)
    app.router.add_post("/api/breaker/reset", reset_breaker)
    app.router.add_post("/api/standby/{node}/return", return_node)
    app.router.add_post("/api/lemons/{node}/release", release_node)
    app.router.add_post("/api/rollout", set_rollout)
    app.router.add_post("/api/incidents/{id}/verdict", verdict)
    app.router.add_get("/api/report", shadow)
    if manage_feed:
        app.on_startup.append(lambda a: a[FEED].start())
        app.on_cleanup.append(lambda a: a[FEED].stop())
    return app


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """On every response, streamed and static ones included (a signal, not a middleware, for that)."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)


def _origin(request: web.Request) -> str:
    """The console's own origin: configured (behind an ingress) or this server's scheme, host and port."""
    return request.app[CFG].public_origin or f"{request.scheme}://{request.host}"


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Authenticate everything but the login page; operators only, with CSRF, for state changes."""
    path = request.path
    if path in PUBLIC or path.startswith("/static/"):
        if request.method == "POST" and not same_origin(request.headers, _origin(request)):
            return _error(403, "cross-origin request refused")
        return await handler(request)
    who = request.app[AUTH].identify(request.headers, request.cookies)
    if who is None and path == "/api/me":  # the page asks before showing its login form: not an error
        return _json({"authenticated": False})
    if who is None:
        return _error(401, "authentication required", headers={"WWW-Authenticate": 'Bearer realm="trainguard"'})
    request[IDENTITY] = who
    if request.method not in ("GET", "HEAD", "OPTIONS"):
        if not who.can_act:
            return _error(403, f"{who.name} is a viewer; only operators act")
        if who.needs_csrf and not (csrf_ok(request.headers, request.cookies) and
                                   same_origin(request.headers, _origin(request))):
            return _error(403, "CSRF token missing or wrong (send the tg_csrf cookie's value as X-CSRF-Token)")
    return await handler(request)


# ------------------------------------------------------------------ pages and session


async def _index(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


async def _api_index(request: web.Request) -> web.StreamResponse:
    """This list: every route with what it does."""
    routes = [{"method": r.method, "path": r.resource.canonical, "doc": (r.handler.__doc__ or "").strip()}
              for r in request.app.router.routes() if r.resource is not None and
              r.resource.canonical.startswith("/api") and r.method != "HEAD"]
    return _json(routes)


async def health(request: web.Request) -> web.StreamResponse:
    """Liveness and whether the console has read the topics' history (no auth)."""
    feed = request.app[FEED]
    return _json({"ok": feed.alive, "caught_up": feed.caught_up, "records": feed.records})


async def login(request: web.Request) -> web.StreamResponse:
    """Exchange a token ({"token": ...}) for an HttpOnly session cookie and a CSRF cookie."""
    body = await _body(request)
    who = request.app[AUTH].by_token(str(body.get("token", "")), "cookie")
    if who is None:
        return _error(401, "unknown token")
    resp = _json(_who(who))
    secure = request.app[CFG].secure_cookies
    resp.set_cookie(SESSION_COOKIE, str(body["token"]), httponly=True, samesite="Strict", secure=secure, path="/")
    resp.set_cookie(CSRF_COOKIE, secrets.token_urlsafe(24), samesite="Strict", secure=secure, path="/")
    return resp


async def logout(request: web.Request) -> web.StreamResponse:
    """Forget the session cookie."""
    resp = _json({"ok": True})
    resp.del_cookie(SESSION_COOKIE, path="/")
    return resp


async def me(request: web.Request) -> web.StreamResponse:
    """Who you are and your role; sets the CSRF cookie if you have none (ingress users)."""
    resp = _json(_who(request[IDENTITY]))
    if not request.cookies.get(CSRF_COOKIE):
        resp.set_cookie(CSRF_COOKIE, secrets.token_urlsafe(24), samesite="Strict",
                        secure=request.app[CFG].secure_cookies, path="/")
    return resp


# ------------------------------------------------------------------ views


async def fleet(request: web.Request) -> web.StreamResponse:
    """Every node with its state (healthy, suspect, evicted, in_repair, standby) and job."""
    return _json(views.fleet(request.app[FEED].state, suspect_s=request.app[CFG].suspect_s))


async def jobs(request: web.Request) -> web.StreamResponse:
    """One row per job: nodes, last step and loss, ETTR, incident count."""
    return _json(views.jobs(request.app[FEED].state))


async def job(request: web.Request) -> web.StreamResponse:
    """One job: step/loss/step-time/MFU series, ETTR and its timeline, incidents, checkpoints."""
    out = views.job(request.app[FEED].state, request.match_info["job"])
    return _error(404, "no such job") if out is None else _json(out)


async def incidents(request: web.Request) -> web.StreamResponse:
    """Incidents newest first; query: limit (<=500), offset, kind, job."""
    q = request.query
    try:
        limit, offset = min(int(q.get("limit", 100)), 500), max(int(q.get("offset", 0)), 0)
    except ValueError:
        return _error(400, "limit and offset must be integers")
    return _json(views.incidents(request.app[FEED].state, limit=limit, offset=offset, kind=q.get("kind", ""),
                                 job_name=q.get("job", "")))


async def incident(request: web.Request) -> web.StreamResponse:
    """One incident: evidence, anomalies, scope, decision, plan steps with results, audit."""
    state = request.app[FEED].state
    out = views.incident(state, request.match_info["id"])
    if out is None:
        return _error(404, "no such incident")
    return _json({**out, "verdict": reports.verdict_of(state, request.match_info["id"])})


async def controls(request: web.Request) -> web.StreamResponse:
    """Pending approvals, breaker state, standby pool, evicted nodes and their self-checks, and each
    rule's mode with its precision (operators' verdicts, as act computed them)."""
    state = request.app[FEED].state
    return _json({**views.controls(state), "precision": reports.precision_rows(state)})


async def events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: incident, decision, result, audit, rails, operator, resync."""
    feed, who, open_streams = request.app[FEED], request[IDENTITY], request.app[STREAMS]
    cap = request.app[CFG].max_streams_per_user
    if open_streams.get(who.name, 0) >= cap:
        return _error(429, f"{who.name} already holds {cap} live event streams (console.max_streams_per_user)")
    open_streams[who.name] = open_streams.get(who.name, 0) + 1
    try:
        return await _stream_events(request, feed)
    finally:
        open_streams[who.name] -= 1
        if not open_streams[who.name]:
            del open_streams[who.name]


async def _stream_events(request: web.Request, feed: ConsoleFeed) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                       "X-Accel-Buffering": "no"})
    await resp.prepare(request)
    queue = feed.subscribe()
    try:
        await resp.write(b": connected\n\n")
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), timeout=15.0)
            except TimeoutError:
                await resp.write(b": keep-alive\n\n")
                continue
            await resp.write(b"event: %s\ndata: %s\n\n" % (event["type"].encode(), msgspec.json.encode(event["data"])))
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        feed.unsubscribe(queue)
    return resp


# ------------------------------------------------------------------ operator actions


async def approve(request: web.Request) -> web.StreamResponse:
    """Approve a decision awaiting approval; act executes it. Operators only."""
    return await _decision_verb(request, "approve")


async def reject(request: web.Request) -> web.StreamResponse:
    """Reject a decision awaiting approval ({"reason": ...}); act blocks it. Operators only."""
    return await _decision_verb(request, "reject")


async def reset_breaker(request: web.Request) -> web.StreamResponse:
    """Close the circuit breaker ({"reason": ...}). Operators only."""
    body = await _body(request)
    return await _send(request, "reset_breaker", "", str(body.get("reason", "")), {})


async def return_node(request: web.Request) -> web.StreamResponse:
    """Return an evicted node to the standby pool after a passing self-check. Operators only.

    The latest passing self-check result published for the node goes along
    for the audit trail only: act returns the node on a self-check it holds
    itself (one it ran, or one the node's agent signed), never on a report in
    the request, so a report in the body is not taken.
    """
    node = request.match_info["node"]
    body = await _body(request)
    check = request.app[FEED].state.selfchecks.get(node)
    report = check.details if check is not None and check.status == "ok" else None
    if report is None:
        return _error(409, f"no passing self-check of {node} is known; run one first")
    return await _send(request, "return_node", node, str(body.get("reason", "")), report)


async def release_node(request: web.Request) -> web.StreamResponse:
    """Lift a lemon node's quarantine ({"reason": ...}). Operators only.

    Act decides (a node it does not hold quarantined is refused and audited); the console only
    refuses at once a node act has not reported as a lemon, so a stale page sends nothing.
    """
    node = request.match_info["node"]
    body = await _body(request)
    if node not in (request.app[FEED].state.rails.get("lemons") or {}):
        return _error(409, f"{node} is not quarantined as a lemon (act's latest rails state)")
    return await _send(request, "release_node", node, str(body.get("reason", "")), {})


async def set_rollout(request: web.Request) -> web.StreamResponse:
    """Promote or demote a kind or rule ({"subject": "default" | "kind:<kind>" | "rule:<rule>",
    "mode": "observe" | "approve" | "auto", "reason": ...}); act applies it to the next incident. Operators only."""
    body = await _body(request)
    subject, mode = str(body.get("subject", "")), str(body.get("mode", ""))
    try:
        parse_subject(subject)
        check_mode(mode)
    except ValueError as exc:
        return _error(400, str(exc))
    return await _send(request, "set_rollout", subject, str(body.get("reason", "")), {}, mode=mode)


async def verdict(request: web.Request) -> web.StreamResponse:
    """Mark an incident a true fault, a false alarm or unsure ({"verdict": "true" | "false" | "unsure",
    "note": ...}); act journals it and it moves the rule's and detector's precision. Operators only."""
    iid = request.match_info["id"]
    body = await _body(request)
    value = str(body.get("verdict", ""))
    try:
        check_value(value)
    except ValueError as exc:
        return _error(400, str(exc))
    if request.app[FEED].state.decision_for(iid) is None:
        return _error(404, f"no decision for incident {iid} is known")
    return await _send(request, "verdict", iid, str(body.get("note", "")), {}, verdict=value)


async def shadow(request: web.Request) -> web.StreamResponse:
    """The shadow report (?since=7d: 90s, 30m, 12h, 7d): per rule, decisions, what they would have done,
    verdicts and precision, over the decisions the console holds."""
    raw = request.query.get("since", "7d")
    units = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    number, unit = (raw[:-1], raw[-1]) if raw[-1:] in units else (raw, "s")
    try:
        since = float(number) * units[unit]
    except ValueError:
        since = -1.0
    if not 0 < since < float("inf"):
        return _error(400, f"since={raw!r} is not a positive duration like 90s, 30m, 12h or 7d")
    return _json(reports.report(request.app[FEED].state, since_s=since))


async def _decision_verb(request: web.Request, verb: str) -> web.StreamResponse:
    did = request.match_info["id"]
    state = request.app[FEED].state
    if did not in state.decisions:
        return _error(404, f"no decision {did}")
    if state.status.get(did) != "awaiting_approval":
        return _error(409, f"decision {did} is {state.status.get(did)}, not awaiting approval")
    body = await _body(request)
    return await _send(request, verb, did, str(body.get("reason", "")), {})


async def _send(request: web.Request, verb: str, subject: str, reason: str,
                report: dict[str, Any], mode: str = "", verdict: str = "") -> web.StreamResponse:
    """Audit the request under the operator's name, then publish the command for act."""
    who: Identity = request[IDENTITY]
    now = time.time()
    feed = request.app[FEED]
    if feed.signer is None:
        return _error(503, "this console holds no signing key (security.console_private_key); it cannot act")
    command = OperatorCommand(ts=now, id=f"op-{uuid.uuid4().hex}", verb=verb, operator=who.name,  # type: ignore[arg-type]
                              subject_id=subject, reason=reason, report=report, expires=now + feed.command_ttl_s,
                              mode=mode, verdict=verdict)
    dec = feed.state.decisions.get(subject) or (feed.state.decision_for(subject) if verdict else None)
    await feed.publish(AuditEntry(ts=now, event=f"console_{verb}", subject_id=subject or verb, actor=who.name,
                                  detail={"command": command.id, "via": who.via, "role": who.role, "reason": reason,
                                          "job": dec.job if dec else "", **({"mode": mode} if mode else {}),
                                          **({"verdict": verdict} if verdict else {})}))
    await feed.publish(command)
    return _json({"command": command.id, "verb": verb, "subject_id": subject, "operator": who.name}, status=202)


async def _body(request: web.Request) -> dict[str, Any]:
    """The JSON object sent, {} when none was; `BadBody` (400) when it is malformed or too deep."""
    if not request.can_read_body:
        return {}
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser's stack
        raise BadBody("request body is not valid JSON (or is nested too deeply)") from None
    if not isinstance(body, dict):
        raise BadBody("request body must be a JSON object")
    limit = request.app[CFG].max_json_depth
    if json_depth(body, limit) > limit:
        raise BadBody(f"request body is nested deeper than {limit} levels")
    return body


def json_depth(value: Any, limit: int) -> int:
    """How deeply `value` nests (a scalar: 0), counted without recursion and only up to `limit` + 1.

    >>> json_depth({"a": [1, {"b": 2}]}, 16), json_depth([[[[]]]], 2)
    (3, 3)
    """
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if not isinstance(item, (dict, list)):
            continue
        deepest = max(deepest, depth)
        if depth > limit:
            return depth
        todo.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _who(who: Identity) -> dict[str, Any]:
    return {"authenticated": True, "name": who.name, "role": who.role, "via": who.via, "can_act": who.can_act}


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=msgspec.json.encode(data), status=status, content_type="application/json")


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=msgspec.json.encode({"error": message}), status=status, content_type="application/json",
                        headers=headers)
