// The live dashboard: polls the JSON API and draws every chart as SVG.
// Every value from the API is put into the page as text, never as markup,
// and with its control and format characters shown as spaces (plain).
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";
const W = 600, H = 140, PAD_L = 44, PAD_B = 16, PAD_T = 6;
const state = { token: sessionStorage.getItem("rw-token") || "", timer: null, busy: false };
// Figures the browser test reads: the last render's time and payload.
window.__rw = { renders: 0, renderMs: 0, payloadBytes: 0, points: 0, error: "" };

const $ = (id) => document.getElementById(id);

// HIDDEN matches control characters (Cc), format characters (Cf) and the
// line and paragraph separators (Zl, Zp: U+2028, U+2029).
const HIDDEN = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu;

// plain returns s with every hidden character a space, as the reports show
// them: a user id is the client's, and a bidirectional control in it
// (U+202E) would make the browser draw another identity, a line separator
// break its row.
function plain(s) {
  return String(s).replace(HIDDEN, " ");
}

function el(tag, attrs, text) {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVGNS, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = plain(text);
  return e;
}

function fmt(n) {
  if (!isFinite(n)) return "–";
  if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(2) + " M";
  if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(1) + " k";
  if (Number.isInteger(n) || Math.abs(n) >= 100) return n.toFixed(0);
  return n.toFixed(n < 10 ? 2 : 1);
}

function fmtTime(ms) {
  const d = new Date(ms);
  return d.toISOString().slice(11, 19);
}

async function get(path) {
  const headers = state.token ? { Authorization: "Bearer " + state.token } : {};
  const r = await fetch(path, { headers, cache: "no-store" });
  if (r.status === 401) {
    const e = new Error("unauthorized");
    e.unauthorized = true;
    throw e;
  }
  const text = await r.text();
  if (!r.ok) throw new Error(path + ": " + r.status + " " + text.trim());
  return { body: JSON.parse(text), bytes: text.length };
}

// chart draws one SVG line chart: lines are {name, cls, values}, each
// value per bucket; scale turns a value into what is plotted.
function chart(title, times, lines, scale) {
  const box = el("div", { class: "chart" });
  box.append(el("div", { class: "title" }, title));
  const svg = el("svg:svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": title });
  let top = 0;
  const scaled = lines.map((l) => l.values.map((v) => v * scale));
  for (const vs of scaled) for (const v of vs) if (v > top) top = v;
  top = top > 0 ? top * 1.1 : 1;
  const n = times.length;
  const x = (i) => PAD_L + (n <= 1 ? 0 : (i * (W - PAD_L - 4)) / (n - 1));
  const y = (v) => PAD_T + (H - PAD_T - PAD_B) * (1 - v / top);
  svg.append(el("svg:line", { class: "axis", x1: PAD_L, y1: H - PAD_B, x2: W, y2: H - PAD_B }));
  svg.append(el("svg:line", { class: "axis", x1: PAD_L, y1: PAD_T, x2: PAD_L, y2: H - PAD_B }));
  svg.append(el("svg:text", { x: 2, y: PAD_T + 8 }, fmt(top)));
  svg.append(el("svg:text", { x: 2, y: H - PAD_B }, "0"));
  if (n > 0) {
    svg.append(el("svg:text", { x: PAD_L, y: H - 3 }, fmtTime(times[0])));
    svg.append(el("svg:text", { x: W - 48, y: H - 3 }, fmtTime(times[n - 1])));
  }
  const legend = el("div", { class: "legend" });
  lines.forEach((l, li) => {
    const pts = new Array(n);
    const vs = scaled[li];
    for (let i = 0; i < n; i++) pts[i] = x(i).toFixed(1) + "," + y(vs[i] || 0).toFixed(1);
    svg.append(el("svg:polyline", { class: l.cls, points: pts.join(" "), "data-points": String(n), "data-name": l.name }));
    // A few points are marked, so that a single window shows.
    if (n <= 30) for (let i = 0; i < n; i++) svg.append(el("svg:circle", { class: l.cls, cx: x(i), cy: y(vs[i] || 0), r: 2.5 }));
    window.__rw.points += n;
    const item = el("span");
    item.append(el("i", { class: l.cls }), document.createTextNode(l.name));
    legend.append(item);
  });
  box.append(svg, legend);
  return box;
}

function outcomeLines(line) {
  return [
    { name: "allowed", cls: "allow", values: line.allow },
    { name: "challenged", cls: "challenge", values: line.challenge },
    { name: "blocked", cls: "block", values: line.block },
    { name: "other", cls: "other", values: line.other },
  ];
}

function fillTable(id, rows) {
  const tb = $(id).querySelector("tbody");
  tb.replaceChildren(...rows.map((cells) => {
    const tr = el("tr");
    for (const c of cells) tr.append(el("td", typeof c === "number" ? { class: "n" } : {}, typeof c === "number" ? fmt(c) : c));
    return tr;
  }));
}

function renderSummary(s) {
  const order = ["allow", "challenge", "block", "token_pass", "fail_open", "fail_closed", "local_limit", "shadow_block", "deny_listed", "allow_listed", "rejected"];
  const names = Object.keys(s.outcomes || {}).sort((a, b) => {
    const ia = order.indexOf(a), ib = order.indexOf(b);
    return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || a.localeCompare(b);
  });
  const tiles = [["requests", s.requests]].concat(names.map((k) => [k, s.outcomes[k]]));
  tiles.push(["dropped", s.dropped]);
  $("tiles").replaceChildren(...tiles.map(([k, v]) => {
    const t = el("div", { class: "tile", id: "total-" + k, "data-value": String(v) });
    t.append(el("div", { class: "v" }, fmt(v)), el("div", { class: "k" }, k));
    return t;
  }));
  $("span").textContent = `${s.windows} windows of ${s.window}, ${new Date(s.from).toISOString()} to ${new Date(s.to).toISOString()}`;
  fillTable("top-refusals", (s.top_refusals || []).map((o) => [o.client, o.count]));
  fillTable("top-requests", (s.top_requests || []).map((o) => [o.client, o.count]));
  fillTable("rules", (s.rules || []).map((r) => [r.tier, r.rule, r.total, r.outcomes.allow || 0, r.outcomes.challenge || 0, r.outcomes.block || 0]));
  const lat = s.store_latency;
  $("latency").textContent = lat.count ? `${fmt(lat.count)} store calls; median ${fmt(lat.p50_ms)} ms (mean of windows), worst window p99 ${fmt(lat.p99_max_ms)} ms` : "no store calls in range";
  const p = s.pipeline;
  const rows = p.running ? [
    ["watermark", p.watermark ? new Date(p.watermark).toISOString() : "–"],
    ["lag", fmt(p.lag_seconds) + " s"],
    ["events rolled up", fmt(p.events)],
    ["windows emitted", fmt(p.windows)],
    ["late events", fmt(p.late) + " (dropped " + fmt(p.late_dropped) + ")"],
    ["corrupt events skipped", fmt(p.corrupt_events)],
    ["decisions dropped by the edges", fmt(s.dropped)],
  ] : [["aggregator", "not running in this process"], ["decisions dropped by the edges", fmt(s.dropped)]];
  $("pipeline").replaceChildren(...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { id: "pipeline-" + k.replace(/\W+/g, "-") }, v)]));
}

function renderSeries(sr) {
  const perSec = 1000 / sr.step_ms;
  window.__rw.points = 0;
  $("chart-total").replaceChildren(chart("all tiers", sr.times, outcomeLines(sr.total), perSec));
  $("charts-tiers").replaceChildren(...(sr.tiers || []).map((l) => chart(l.tier, sr.times, outcomeLines(l), perSec)));
  $("charts-rules").replaceChildren(...(sr.rules || []).map((l) => chart(l.tier + " · " + l.rule, sr.times, outcomeLines(l), perSec)));
  $("chart-latency").replaceChildren(chart("store latency", sr.times, [
    { name: "p50", cls: "p50", values: sr.store_latency_p50_ms },
    { name: "p99 (worst window)", cls: "p99", values: sr.store_latency_p99_ms },
  ], 1));
  $("chart-dropped").replaceChildren(chart("decisions dropped by the edges (per s)", sr.times, [{ name: "dropped", cls: "block", values: sr.dropped }], perSec));
}

function renderAlerts(a, from, to) {
  const empty = $("alerts-empty");
  const recs = a.records || [];
  const tl = $("alerts-timeline");
  if (!a.configured || recs.length === 0) {
    empty.hidden = false;
    empty.textContent = a.configured ? "No alerts raised." : "No alerts file configured (serve.dashboard.alerts_file).";
    tl.replaceChildren();
    fillTable("alerts", []);
    return;
  }
  empty.hidden = true;
  const svg = el("svg:svg", { viewBox: `0 0 ${W} 40`, preserveAspectRatio: "none" });
  svg.append(el("svg:line", { class: "axis", x1: 0, y1: 20, x2: W, y2: 20 }));
  const t0 = Date.parse(from), t1 = Date.parse(to);
  for (const r of recs) {
    const time = Date.parse((r.alert || r.action).time);
    if (!(time >= t0 && time <= t1) || t1 <= t0) continue;
    const cls = r.alert ? r.alert.state : "action";
    const c = el("svg:circle", { class: cls, cx: ((time - t0) / (t1 - t0)) * W, cy: 20, r: 4 });
    c.append(el("svg:title", {}, r.alert ? r.alert.summary : `${r.action.policy}: ${r.action.list} ${r.action.target}`));
    svg.append(c);
  }
  tl.replaceChildren(svg);
  const rows = recs.slice().reverse().slice(0, 50).map((r) => r.alert
    ? [new Date(r.alert.time).toISOString(), r.alert.state, r.alert.severity, r.alert.type, r.alert.summary]
    : [new Date(r.action.time).toISOString(), r.action.applied ? "applied" : "not applied" + (r.action.why ? " (" + r.action.why + ")" : ""), "action", r.action.policy, `${r.action.list} ${r.action.target}`]);
  fillTable("alerts", rows);
  if (a.skipped) { empty.hidden = false; empty.textContent = `${a.skipped} lines skipped: neither an alert nor an action.`; }
}

function renderLists(l) {
  const empty = $("lists-empty");
  const es = l.entries || [];
  fillTable("lists", es.map((e) => [e.list + (e.pending ? " (pending)" : ""), e.target, e.expires ? new Date(e.expires).toISOString() : "never", e.by || "", e.reason || ""]));
  empty.hidden = es.length > 0;
  empty.textContent = l.configured ? "The lists are empty." : "No list source configured.";
}

async function refresh() {
  if (state.busy) return;
  state.busy = true;
  const range = $("range").value;
  const q = range ? "last=" + encodeURIComponent(range) : "";
  const points = Math.max(60, Math.min(600, Math.floor(($("chart-total").clientWidth || 600))));
  try {
    const [summary, series, alerts, lists] = await Promise.all([
      get("/api/summary?" + q), get("/api/series?" + q + "&points=" + points), get("/api/alerts"), get("/api/lists"),
    ]);
    const t0 = performance.now();
    renderSummary(summary.body);
    renderSeries(series.body);
    renderAlerts(alerts.body, series.body.from, series.body.to);
    renderLists(lists.body);
    // Wait for layout and paint, so the time includes them.
    await new Promise((ok) => requestAnimationFrame(() => setTimeout(ok, 0)));
    window.__rw.renderMs = performance.now() - t0;
    window.__rw.payloadBytes = summary.bytes + series.bytes + alerts.bytes + lists.bytes;
    window.__rw.seriesBytes = series.bytes;
    window.__rw.renders++;
    $("status").textContent = "updated " + new Date().toLocaleTimeString();
    $("status").className = "muted";
  } catch (e) {
    if (e.unauthorized) {
      $("login").hidden = false;
      $("main").hidden = true;
      stop();
    } else {
      $("status").textContent = String(e.message || e);
      $("status").className = "firing";
      window.__rw.error = String(e.message || e);
    }
  } finally {
    state.busy = false;
  }
}

function stop() { if (state.timer) clearInterval(state.timer); state.timer = null; }

function start() {
  stop();
  refresh();
  const every = Number(new URLSearchParams(location.search).get("poll")) || 2000;
  state.timer = setInterval(refresh, Math.max(500, every));
}

document.addEventListener("DOMContentLoaded", () => {
  $("range").addEventListener("change", refresh);
  $("login").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.token = $("token").value;
    sessionStorage.setItem("rw-token", state.token);
    $("login").hidden = true;
    $("main").hidden = false;
    start();
  });
  start();
});
