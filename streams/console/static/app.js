// trainguard console: one page, five views, live over server-sent events.
// Every value from the API is put in the DOM as text (never as HTML).
"use strict";

const $ = (sel) => document.querySelector(sel);
const state = { me: null, view: "", arg: "", source: null, timer: null, charts: [], fresh: new Set(), rendered: 0 };

function el(tag, attrs, ...kids) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "on") for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn);
    else if (k === "cls") node.className = v;
    else if (k === "style") node.style.cssText = v; // CSSOM: allowed by the CSP, a style attribute is not
    else if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat(Infinity)) if (kid !== null && kid !== undefined) node.append(kid instanceof Node ? kid : String(kid));
  return node;
}
const cookie = (name) => (document.cookie.split("; ").find((c) => c.startsWith(name + "=")) || "").split("=")[1] || "";
const when = (ts) => (ts ? new Date(ts * 1000).toISOString().replace("T", " ").slice(0, 19) : "");
const pill = (s) => el("span", { cls: "pill st-" + s }, s);
const fmt = (v) => (typeof v === "object" && v !== null ? JSON.stringify(v) : String(v));

async function api(path, opts) {
  const init = Object.assign({ credentials: "same-origin" }, opts || {});
  init.headers = Object.assign({ "Content-Type": "application/json", "X-CSRF-Token": cookie("tg_csrf") }, init.headers || {});
  const resp = await fetch(path, init);
  const body = await resp.json();
  if (!resp.ok) throw new Error(body.error || resp.statusText);
  return body;
}

function toast(text) {
  const t = el("div", { cls: "toast" }, text);
  $("#toasts").append(t);
  setTimeout(() => t.remove(), 6000);
}

// ------------------------------------------------------------------ session

async function start() {
  state.me = await api("/api/me");
  if (!state.me.authenticated) { $("#login").hidden = false; $("#view").hidden = true; return; }
  $("#login").hidden = true; $("#view").hidden = false; $("#logout").hidden = false;
  $("#who").textContent = `${state.me.name} (${state.me.role})`;
  connect();
  route();
}

$("#login-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  try { await api("/api/login", { method: "POST", body: JSON.stringify({ token: $("#token").value }) }); start(); }
  catch (err) { $("#login-error").textContent = err.message; }
});
$("#logout").addEventListener("click", async () => { await api("/api/logout", { method: "POST" }); location.reload(); });

function connect() {
  const src = new EventSource("/api/events");
  state.source = src;
  src.onopen = () => { $("#live").className = "live on"; soon(); };  // (re)connected: catch up on what was missed
  src.onerror = () => { $("#live").className = "live off"; };
  src.addEventListener("incident", (e) => onIncident(JSON.parse(e.data)));
  for (const type of ["decision", "result", "audit", "rails", "resync"]) src.addEventListener(type, (e) => onChange(type, JSON.parse(e.data)));
}

function onIncident(row) {
  state.fresh.add(row.id);
  const badge = $("#new-count");
  if (state.view !== "incidents") { badge.hidden = false; badge.textContent = String(state.fresh.size); }
  soon();
}

function onChange(type, data) {
  if (type === "audit" && data.event && data.event.startsWith("operator_") && data.detail && data.detail.command) {
    toast(`${data.actor}: ${data.event.slice(9)} ${data.detail.applied ? "applied" : "NOT applied"}: ${data.detail.message}`);
  }
  soon();
}

function soon() {  // many events in a burst cause one refresh
  clearTimeout(state.timer);
  state.timer = setTimeout(route, 400);
}

// ------------------------------------------------------------------ routing

window.addEventListener("hashchange", route);

async function route() {
  if (!state.me || !state.me.authenticated) return;
  const [view, ...rest] = (location.hash.slice(1) || "fleet").split("/");
  state.view = view; state.arg = decodeURIComponent(rest.join("/"));
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.view === view);
  if (view === "incidents") { state.fresh.clear(); $("#new-count").hidden = true; }
  const render = { fleet: renderFleet, jobs: state.arg ? renderJob : renderJobs,
                   incidents: state.arg ? renderIncident : renderIncidents, controls: renderControls,
                   report: renderReport }[view] || renderFleet;
  const began = performance.now();
  try {
    const content = await render(state.arg);
    for (const c of state.charts) c.destroy();
    state.charts = [];
    const target = $("#view");
    target.replaceChildren(content);
    for (const fn of content._after || []) fn();
    target.dataset.view = view;
    state.rendered += 1;
    target.dataset.renderMs = (performance.now() - began).toFixed(1);  // fetch + build + draw, read by the benchmark
    target.dataset.rendered = String(state.rendered);
  } catch (err) { toast(`could not load ${view}: ${err.message}`); }
  updatePending();
}

async function updatePending() {
  try {
    const c = await api("/api/controls");
    const badge = $("#pending-count");
    badge.hidden = c.pending.length === 0; badge.textContent = String(c.pending.length);
  } catch (err) { /* shown by the view itself */ }
}

// ------------------------------------------------------------------ views

async function renderFleet() {
  const f = await api("/api/fleet");
  const labels = { healthy: "healthy", suspect: "suspect", evicted: "cordoned / evicted", in_repair: "in repair", standby: "standby" };
  const cards = el("div", { cls: "cards" }, Object.entries(labels).map(([k, l]) =>
    el("div", { cls: "card", id: "count-" + k }, el("div", { cls: "n" }, f.counts[k]), el("div", { cls: "l" }, el("i", { cls: "tile s-" + k, style: "display:inline-block;margin-right:6px" }), l))));
  const grid = el("div", { cls: "grid", id: "node-grid" }, f.nodes.map((n) =>
    el("div", { cls: "tile s-" + n.state, title: `${n.node}: ${n.state}${n.job ? " (" + n.job + ")" : ""}` })));
  const notable = f.nodes.filter((n) => n.state !== "healthy");
  const rows = notable.map((n) => el("tr", {}, el("td", {}, n.node), el("td", {}, el("span", { cls: "pill s-" + n.state }, labels[n.state])),
    el("td", {}, n.job), el("td", {}, n.replaces ? `replaces ${n.replaces}` : ""), el("td", {}, n.recent_incidents), el("td", {}, when(n.last_seen))));
  return el("div", {}, el("h1", {}, `Fleet: ${f.nodes.length} nodes`), cards, grid,
    el("h2", {}, `Nodes that are not healthy (${notable.length})`),
    el("table", { id: "fleet-table" }, el("tr", {}, ["node", "state", "job", "standby", "recent incidents", "last seen"].map((h) => el("th", {}, h))), rows));
}

async function renderJobs() {
  const jobs = await api("/api/jobs");
  const rows = jobs.map((j) => el("tr", { cls: "click", on: { click: () => { location.hash = "jobs/" + encodeURIComponent(j.job); } } },
    el("td", {}, el("a", { href: "#jobs/" + encodeURIComponent(j.job) }, j.job)), el("td", {}, j.nodes), el("td", {}, j.step ?? ""),
    el("td", {}, j.loss === null ? "" : Number(j.loss).toFixed(4)), el("td", {}, (j.ettr * 100).toFixed(1) + " %"), el("td", {}, j.incidents)));
  return el("div", {}, el("h1", {}, "Jobs"),
    el("table", { id: "jobs-table" }, el("tr", {}, ["job", "nodes", "step", "loss", "ETTR", "incidents"].map((h) => el("th", {}, h))), rows));
}

function chart(title, x, series, width) {
  const box = el("div", { cls: "panel chart" }, el("h2", {}, title));
  box._draw = () => {
    const opts = { width: width || Math.max(380, box.clientWidth - 24), height: 220, scales: { x: { time: true } },
      axes: [{ stroke: "#8a96a3", grid: { stroke: "#2a3440" } }, ...series.map((s, i) => ({ scale: s.scale || "y", side: i ? 1 : 3, stroke: "#8a96a3", grid: { stroke: i ? "transparent" : "#2a3440" } }))],
      series: [{ label: "time" }, ...series.map((s) => ({ label: s.label, stroke: s.color, scale: s.scale || "y", width: 1.5 }))] };
    state.charts.push(new uPlot(opts, [x, ...series.map((s) => s.data)], box));
  };
  return box;
}

const CAUSES = ["detection", "localisation", "failover", "recompute"];
const COLORS = { detection: "#f85149", localisation: "#d29922", failover: "#a371f7", recompute: "#58a6ff" };

function ettrPanel(j) {
  const e = j.ettr, wall = e.wall_s || 1;
  const bar = el("div", { cls: "bar" }, el("div", { style: `width:${(e.productive_s / wall) * 100}%;background:var(--ok)` }),
    CAUSES.map((c) => el("div", { cls: "c-" + c, style: `width:${((e[c + "_s"] || 0) / wall) * 100}%` })));
  const legend = el("div", { cls: "legend" }, el("span", {}, el("i", { style: "background:var(--ok)" }), `productive ${e.productive_s.toFixed(1)} s`),
    CAUSES.map((c) => el("span", {}, el("i", { cls: "c-" + c }), `${c} ${(e[c + "_s"] || 0).toFixed(1)} s`)));
  return el("div", { cls: "panel", id: "ettr" }, el("h2", {}, "ETTR"), el("div", { cls: "gauge" }, (e.ettr * 100).toFixed(1) + " %"),
    el("div", { cls: "dim" }, `${e.incidents} incident(s), wall ${e.wall_s.toFixed(1)} s`), bar, legend, timeline(j));
}

function timeline(j) {  // unproductive intervals by cause, incidents as ticks, checkpoints as dots
  const ns = "http://www.w3.org/2000/svg", W = 900, H = 90;
  const ts = j.series.ts, t0 = Math.min(ts[0] ?? Infinity, ...j.timeline.map((t) => t.start)), t1 = Math.max(ts[ts.length - 1] ?? -Infinity, ...j.timeline.map((t) => t.end));
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`); svg.setAttribute("width", "100%"); svg.id = "ettr-timeline";
  if (!(t1 > t0)) return svg;
  const x = (t) => 10 + ((t - t0) / (t1 - t0)) * (W - 20);
  const add = (tag, attrs, text) => { const n = document.createElementNS(ns, tag); for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v); if (text) n.textContent = text; svg.append(n); return n; };
  add("rect", { x: 10, y: 20, width: W - 20, height: 24, fill: "#3fb950", opacity: 0.25 });
  j.timeline.forEach((iv) => add("rect", { x: x(iv.start), y: 20 + CAUSES.indexOf(iv.cause) * 6, width: Math.max(1, x(iv.end) - x(iv.start)), height: 6, fill: COLORS[iv.cause] }));
  j.incidents.forEach((i) => { add("line", { x1: x(i.detected_at), x2: x(i.detected_at), y1: 12, y2: 52, stroke: "#f85149" }); add("text", { x: x(i.detected_at) + 2, y: 10 }, i.kind); });
  j.checkpoints.filter((c) => c.status === "saved").forEach((c) => add("circle", { cx: x(c.ts), cy: 62, r: 3, fill: "#58a6ff" }));
  add("text", { x: 10, y: 82 }, when(t0)); add("text", { x: W - 130, y: 82 }, when(t1));
  return svg;
}

async function renderJob(name) {
  const j = await api("/api/jobs/" + encodeURIComponent(name));
  const s = j.series;
  const charts = [chart("Loss and step", s.ts, [{ label: "loss", data: s.loss, color: "#58a6ff" }, { label: "step", data: s.step, color: "#8a96a3", scale: "step" }]),
    chart("Step time and MFU", s.ts, [{ label: "step time (s)", data: s.step_time_s, color: "#d29922" }, { label: "MFU", data: s.mfu, color: "#3fb950", scale: "mfu" }])];
  const incidents = el("table", {}, el("tr", {}, ["detected", "kind", "incident"].map((h) => el("th", {}, h))),
    j.incidents.slice().reverse().map((i) => el("tr", {}, el("td", {}, when(i.detected_at)), el("td", {}, i.kind), el("td", {}, el("a", { href: "#incidents/" + encodeURIComponent(i.id) }, i.id)))));
  const ckpts = el("table", { id: "checkpoints" }, el("tr", {}, ["step", "status", "path", "at"].map((h) => el("th", {}, h))),
    j.checkpoints.slice().reverse().map((c) => el("tr", {}, el("td", {}, c.step), el("td", {}, c.status), el("td", {}, c.path), el("td", {}, when(c.ts)))));
  const last = s.step.length ? `step ${s.step[s.step.length - 1]}` : "no steps yet";
  const page = el("div", {}, el("h1", {}, `Job ${j.job}`), el("div", { cls: "dim" }, `${last} on ${j.nodes.length} node(s)`),
    ettrPanel(j), charts,
    el("div", { cls: "row" }, el("div", { cls: "panel" }, el("h2", {}, "Incidents"), incidents), el("div", { cls: "panel" }, el("h2", {}, "Checkpoints"), ckpts)));
  page._after = charts.map((c) => c._draw);
  return page;
}

async function renderIncidents() {
  const page = await api("/api/incidents?limit=200");
  const rows = page.items.map((i) => el("tr", { cls: "click" + (state.fresh.has(i.id) ? " fresh" : ""), "data-id": i.id, on: { click: () => { location.hash = "incidents/" + encodeURIComponent(i.id); } } },
    el("td", {}, when(i.detected_at)), el("td", {}, i.kind), el("td", {}, i.job), el("td", {}, i.nodes.join(", ")),
    el("td", {}, i.decision ? i.decision.rule : ""), el("td", {}, i.decision ? pill(i.decision.status) : el("span", { cls: "dim" }, "undecided")),
    el("td", {}, el("a", { href: "#incidents/" + encodeURIComponent(i.id) }, i.id))));
  return el("div", {}, el("h1", {}, `Incidents (${page.total})`),
    el("table", { id: "incidents-table" }, el("tr", {}, ["detected", "kind", "job", "nodes", "rule", "decision", "id"].map((h) => el("th", {}, h))), rows),
    page.total > page.items.length ? el("div", { cls: "dim" }, `newest ${page.items.length} shown; the API pages through all (/api/incidents?offset=)`) : null);
}

const kv = (obj) => el("dl", { cls: "kv" }, Object.entries(obj || {}).map(([k, v]) => [el("dt", {}, k), el("dd", {}, fmt(v))]));

async function renderIncident(id) {
  const d = await api("/api/incidents/" + encodeURIComponent(id));
  const inc = d.incident, dec = d.decision;
  const anomalies = el("table", { id: "anomalies" }, el("tr", {}, ["detector", "kind", "nodes", "ranks", "score", "evidence"].map((h) => el("th", {}, h))),
    d.anomalies.map((a) => el("tr", {}, el("td", {}, a.detector), el("td", {}, a.kind), el("td", {}, a.nodes.join(", ")), el("td", {}, a.ranks.join(", ")), el("td", {}, a.score.toFixed(2)), el("td", {}, kv(a.evidence)))));
  const decision = dec ? el("div", { cls: "panel", id: "decision" }, el("h2", {}, "Decision"),
    kv({ status: dec.status, rule: dec.rule, reason: dec.reason, "dry run": dec.dry_run }),
    el("h2", {}, "Inputs"), kv(dec.inputs), el("h2", {}, "Rejected alternatives"), el("ul", {}, dec.alternatives.map((a) => el("li", {}, a))))
    : el("div", { cls: "panel" }, el("h2", {}, "Decision"), el("span", { cls: "dim" }, "none published yet"));
  const steps = el("table", { id: "steps" }, el("tr", {}, ["#", "action", "nodes", "result", "message"].map((h) => el("th", {}, h))),
    d.steps.map((s) => el("tr", {}, el("td", {}, s.index), el("td", {}, s.action), el("td", {}, s.nodes.join(", ") || s.depends),
      el("td", {}, s.result ? pill(s.result.status) : el("span", { cls: "dim" }, "pending")), el("td", {}, s.result ? s.result.message : ""))));
  const audit = el("table", { id: "audit" }, el("tr", {}, ["at", "event", "actor", "detail"].map((h) => el("th", {}, h))),
    d.audit.map((a) => el("tr", {}, el("td", {}, when(a.ts)), el("td", {}, a.event), el("td", {}, a.actor), el("td", {}, kv(a.detail)))));
  return el("div", {}, el("h1", {}, `${inc.kind} incident on ${inc.job}`), el("div", { cls: "dim" }, `${inc.id}: onset ${when(inc.onset)}, detected ${when(inc.detected_at)}`),
    el("div", { cls: "row" }, el("div", { cls: "panel", id: "evidence" }, el("h2", {}, "Evidence"), kv(inc.evidence)),
      el("div", { cls: "panel", id: "scope" }, el("h2", {}, "Scope"), kv(d.scope))),
    el("div", { cls: "panel" }, el("h2", {}, `Absorbed anomalies (${d.anomalies.length})`), anomalies,
      d.missing_anomalies.length ? el("div", { cls: "dim" }, `not in the console's window: ${d.missing_anomalies.join(", ")}`) : null),
    decision, dec ? verdictPanel(inc.id, d.verdict) : null,
    el("div", { cls: "panel" }, el("h2", {}, "Plan steps"), steps), el("div", { cls: "panel" }, el("h2", {}, "Audit"), audit));
}

function verdictPanel(id, v) {  // the on-call's word: a true fault, a false alarm, or unsure
  const can = state.me.can_act;
  const notes = state.notes || (state.notes = {});  // kept across the live re-renders while one types
  const note = el("input", { id: "verdict-note", type: "text", placeholder: "note (why)", disabled: !can, value: notes[id] || "",
    on: { input: (e) => { notes[id] = e.target.value; } } });
  const mark = (value, label) => el("button", { cls: "verdict-" + value, "data-verdict": value, disabled: !can,
    on: { click: () => act(`/api/incidents/${encodeURIComponent(id)}/verdict`, { verdict: value, note: notes[id] || "" }, `mark ${label}`) } }, label);
  return el("div", { cls: "panel", id: "verdict" }, el("h2", {}, "Verdict"),
    el("div", { id: "verdict-current" }, v ? [el("span", { cls: "pill st-" + (v.verdict === "true" ? "ok" : v.verdict === "false" ? "failed" : "pending") }, v.verdict), ` by ${v.operator} at ${when(v.ts)}`, v.note ? `: ${v.note}` : ""]
      : el("span", { cls: "dim" }, "no verdict yet")),
    el("p", {}, mark("true", "True fault"), " ", mark("false", "False alarm"), " ", mark("unsure", "Unsure"), " ", note));
}

const pct = (p) => (p === null || p === undefined ? "–" : (p * 100).toFixed(0) + " %");

async function renderReport() {  // the shadow report: read before promoting a rule from observe
  const since = state.arg || "7d";
  const r = await api("/api/report?since=" + encodeURIComponent(since));
  const rows = r.rules.map((x) => el("tr", { "data-rule": x.rule }, el("td", {}, x.rule), el("td", { cls: "mode" }, x.mode || "–"),
    el("td", {}, `${x.decisions} (${x.observed}/${x.acted}/${x.held})`),
    el("td", {}, `evict ${x.evictions} (${x.nodes.length} nodes), ${x.restarts} restarts, ${x.rollbacks} rollbacks`),
    el("td", {}, x.would_block), el("td", { cls: "verdicts" }, x.verdicts.true === undefined ? "–" : `${x.verdicts.true}/${x.verdicts.false}/${x.verdicts.unsure}`),
    el("td", { cls: "precision" }, pct(r.precision[x.rule]))));
  return el("div", {}, el("h1", {}, "Shadow report"),
    el("div", { cls: "dim", id: "report-window" }, `${r.decisions} decision(s) in the last ${since}; window: `,
      ["1h", "1d", "7d", "30d"].map((w) => [el("a", { href: "#report/" + w }, w), " "]),
      ". Time saved: `trainguard actions report` (it reads act's ETTR account)."),
    el("div", { cls: "panel" }, el("table", { id: "report-table" },
      el("tr", {}, ["rule", "mode", "decisions (observed/acted/held)", "would do", "breaker would block", "verdicts true/false/unsure", "precision"].map((h) => el("th", {}, h))), rows)));
}

async function act(path, body, label) {
  try { const r = await api(path, { method: "POST", body: JSON.stringify(body || {}) }); toast(`${label}: sent as ${r.command}`); soon(); }
  catch (err) { toast(`${label} refused: ${err.message}`); }
}

function precisionPanel(p) {  // each rule's mode next to its precision (operators' verdicts, act's figures)
  const rows = p.rules.map((r) => el("tr", { "data-rule": r.rule, cls: r.low ? "low" : "" }, el("td", {}, r.rule), el("td", { cls: "mode" }, r.mode),
    el("td", { cls: "precision" }, pct(r.precision), r.low ? " (below the floor)" : ""), el("td", {}, `${r.true}/${r.false}/${r.unsure}`)));
  return el("div", { cls: "panel", id: "precision" }, el("h2", {}, "Precision by rule"),
    p.known ? el("div", { cls: "dim" }, `true / (true + false) over ${Math.round(p.window_s / 86400)} d of verdicts; a rule in auto below ${pct(p.floor)} on ${p.min_verdicts}+ verdicts alerts.`)
      : el("div", { cls: "dim" }, "act has not reported yet"),
    el("table", { id: "rule-precision" }, el("tr", {}, ["rule", "mode", "precision", "verdicts true/false/unsure"].map((h) => el("th", {}, h))), rows),
    p.detectors.length ? el("table", { id: "detector-precision" }, el("tr", {}, ["detector", "precision", "verdicts true/false/unsure"].map((h) => el("th", {}, h))),
      p.detectors.map((d) => el("tr", { "data-detector": d.detector }, el("td", {}, d.detector), el("td", { cls: "precision" }, pct(d.precision)), el("td", {}, `${d.true}/${d.false}/${d.unsure}`)))) : null);
}

async function renderControls() {
  const c = await api("/api/controls");
  const can = state.me.can_act;
  const b = c.breaker;
  const breaker = el("div", { cls: "panel", id: "breaker" }, el("h2", {}, "Circuit breaker"),
    el("div", { id: "breaker-state" }, c.known ? (b.tripped ? el("span", { cls: "pill st-failed" }, "tripped") : el("span", { cls: "pill st-ok" }, "closed")) : el("span", { cls: "dim" }, "act has not reported yet"),
      " ", b.tripped ? `tripped: ${b.reason}` : (c.known ? "closed: evictions allowed" : "")),
    el("p", {}, el("button", { id: "reset-breaker", cls: "danger", disabled: !can || !b.tripped, on: { click: () => act("/api/breaker/reset", {}, "reset breaker") } }, "Reset breaker")));
  const pending = el("table", { id: "approvals" }, el("tr", {}, ["incident", "kind", "job", "rule", "reason", "plan", ""].map((h) => el("th", {}, h))),
    c.pending.map((p) => el("tr", { "data-decision": p.decision.id, "data-incident": p.decision.incident_id },
      el("td", {}, el("a", { href: "#incidents/" + encodeURIComponent(p.decision.incident_id) }, p.decision.incident_id)),
      el("td", {}, p.decision.kind), el("td", {}, p.decision.job), el("td", {}, p.decision.rule), el("td", {}, p.decision.reason),
      el("td", {}, p.decision.plan.map((s) => s.action).join(" → ")),
      el("td", {}, el("button", { cls: "approve", disabled: !can, on: { click: () => act(`/api/decisions/${encodeURIComponent(p.decision.id)}/approve`, {}, "approve") } }, "Approve"), " ",
        el("button", { cls: "reject danger", disabled: !can, on: { click: () => act(`/api/decisions/${encodeURIComponent(p.decision.id)}/reject`, { reason: "rejected in the console" }, "reject") } }, "Reject")))));
  const evicted = el("table", { id: "evicted" }, el("tr", {}, ["node", "self-check", ""].map((h) => el("th", {}, h))),
    c.evicted.map((n) => el("tr", {}, el("td", {}, n.node),
      el("td", {}, n.selfcheck ? [pill(n.selfcheck.passed ? "ok" : "failed"), " ", when(n.selfcheck.ts)] : el("span", { cls: "dim" }, "none yet")),
      el("td", {}, el("button", { cls: "return", disabled: !can || !(n.selfcheck && n.selfcheck.passed), on: { click: () => act(`/api/standby/${encodeURIComponent(n.node)}/return`, {}, "return " + n.node) } }, "Return node after self-check")))));
  const lemons = el("table", { id: "lemons" }, el("tr", {}, ["node", "why", "since", "history", ""].map((h) => el("th", {}, h))),
    (c.lemons || []).map((n) => el("tr", { "data-node": n.node }, el("td", {}, n.node), el("td", {}, n.reason), el("td", {}, when(n.since)),
      el("td", {}, el("ul", { cls: "lemon-history" }, n.history.map((h) => el("li", {}, `${h.what} ${h.kind} ${h.id}${h.job ? " (job " + h.job + ", attempt " + h.attempt + ")" : ""} `, when(h.ts))))),
      el("td", {}, el("button", { cls: "release danger", disabled: !can, on: { click: () => act(`/api/lemons/${encodeURIComponent(n.node)}/release`, { reason: "released in the console" }, "release " + n.node) } }, "Release")))));
  const swaps = Object.entries(c.pool.swaps);
  const modes = ["observe", "approve", "auto"];
  const modeButtons = (subject, current) => modes.map((m) => el("button", { cls: "rollout-" + m, "data-mode": m, disabled: !can || m === current,
    on: { click: () => act("/api/rollout", { subject, mode: m, reason: "set in the console" }, `${subject} → ${m}`) } }, m));
  const rollout = el("div", { cls: "panel", id: "rollout" }, el("h2", {}, "Rollout"),
    c.rollout.known ? el("div", { cls: "dim" }, `default: ${c.rollout.default}. observe: decide and journal, send nothing; approve: hold for an operator; auto: act.`)
      : el("div", { cls: "dim" }, "act has not reported yet"),
    el("table", { id: "rollout-kinds" }, el("tr", {}, ["kind", "mode", ""].map((h) => el("th", {}, h))),
      c.rollout.kinds.map((k) => el("tr", { "data-kind": k.kind }, el("td", {}, k.kind),
        el("td", { cls: "mode" }, k.mode + (k.approval_kind ? " (approval_kinds)" : k.overridden ? "" : " (default)")),
        el("td", {}, modeButtons("kind:" + k.kind, k.overridden ? k.mode : "")))),
      el("tr", { "data-kind": "" }, el("td", {}, el("em", {}, "default")), el("td", { cls: "mode" }, c.rollout.default),
        el("td", {}, modeButtons("default", c.rollout.default)))),
    c.rollout.rules.length ? el("table", { id: "rollout-rules" }, el("tr", {}, ["rule", "mode", ""].map((h) => el("th", {}, h))),
      c.rollout.rules.map((r) => el("tr", { "data-rule": r.rule }, el("td", {}, r.rule), el("td", { cls: "mode" }, r.mode),
        el("td", {}, modeButtons("rule:" + r.rule, r.mode))))) : null);
  return el("div", {}, el("h1", {}, "Controls"), can ? null : el("p", { cls: "dim" }, "You are a viewer: actions are disabled."),
    el("div", { cls: "panel" }, el("h2", {}, `Pending approvals (${c.pending.length})`), c.approval_kinds.length ? el("div", { cls: "dim" }, `kinds that wait for approval: ${c.approval_kinds.join(", ")}`) : null, pending),
    breaker,
    rollout,
    precisionPanel(c.precision),
    el("div", { cls: "panel", id: "standby" }, el("h2", {}, `Standby pool (${c.pool.spares.length} ready)`), el("div", {}, c.pool.spares.join(", ") || "empty"),
      swaps.length ? el("div", { cls: "dim" }, "swapped in: " + swaps.map(([s, n]) => `${s} for ${n}`).join(", ")) : null,
      el("h2", {}, "Evicted nodes"), evicted),
    el("div", { cls: "panel", id: "lemon-nodes" }, el("h2", {}, `Quarantined lemon nodes (${(c.lemons || []).length})`),
      el("div", { cls: "dim" }, "held out of the standby pool after repeated incidents or failed self-checks; a passing self-check does not return one, an operator's release does"),
      lemons));
}

start();
