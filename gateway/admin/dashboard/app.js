// Parley live-ops dashboard: reads the admin API with the key the operator
// pastes (kept in sessionStorage for this tab only) and draws the rollout,
// the fleet, the experiment and the candidates' training curves. No
// libraries, no fonts, nothing fetched from another origin.
"use strict";

const API = document.querySelector('meta[name="parley-api"]').content.replace(/\/$/, "");
const DEPLOYMENT = document.querySelector('meta[name="parley-deployment"]').content;
const KEY_ITEM = "parley.admin.key";
const REFRESH_MS = 10000;
const SVGNS = "http://www.w3.org/2000/svg";
const ARM_COLOR = { stable: "#2f6fd6", canary: "#e07a16" };
const PALETTE = ["#2f6fd6", "#e07a16", "#1f8a4c", "#8a3fc4", "#c8322f", "#00838f"];

let current = null; // the last rollout state, for the CAS token of the action buttons

// --- small DOM helpers -------------------------------------------------

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") e.textContent = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const k of kids.flat(Infinity)) {
    if (k === null || k === undefined) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") e.textContent = v;
    else e.setAttribute(k, String(v));
  }
  for (const k of kids.flat(Infinity)) if (k) e.append(k);
  return e;
}

function put(id, ...kids) {
  const node = document.getElementById(id);
  node.replaceChildren(...kids.flat(Infinity).filter((k) => k !== null && k !== undefined));
}

function table(headers, rows) {
  return el("table", {},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { class: h.num ? "num" : null, text: h.label || h })))),
    el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c, i) => {
      if (c instanceof Node && c.tagName === "TD") return c;
      return el("td", { class: headers[i].num ? "num" : null }, c instanceof Node ? c : String(c ?? "–"));
    })))));
}

function fmt(x, digits = 2) {
  if (x === undefined || x === null || !Number.isFinite(x)) return "–";
  return x.toFixed(digits);
}

function fmtP(p) {
  if (!Number.isFinite(p)) return "–";
  return p < 0.001 ? p.toExponential(1) : p.toFixed(3);
}

function pct(x) { return Number.isFinite(x) ? (100 * x).toFixed(2) + " %" : "–"; }

function when(ts) {
  if (!ts || ts.startsWith("0001")) return "–";
  const d = new Date(ts);
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

function pill(text, cls) { return el("span", { class: "pill " + (cls || text), text }); }

// --- API ---------------------------------------------------------------

class APIError extends Error {
  constructor(status, code, message) {
    super(code + ": " + message);
    this.status = status;
  }
}

async function api(path, init) {
  const key = sessionStorage.getItem(KEY_ITEM);
  if (!key) throw new APIError(401, "unauthorized", "paste a live-ops API key");
  const sep = path.includes("?") ? "&" : "?";
  const resp = await fetch(API + path + sep + "deployment=" + encodeURIComponent(DEPLOYMENT), {
    ...init,
    headers: { Authorization: "Bearer " + key, Accept: "application/json", "Content-Type": "application/json" },
    cache: "no-store",
  });
  const body = await resp.json().catch(() => null);
  if (!resp.ok) {
    const e = (body && body.error) || { code: String(resp.status), message: resp.statusText };
    throw new APIError(resp.status, e.code, e.message);
  }
  return body;
}

// --- rendering -----------------------------------------------------------

function renderRollout(st) {
  const s = st.state;
  current = s;
  const rows = [
    ["state", el("span", { id: "rollout-state" }, pill(s.state))],
    ["stable", el("strong", { id: "stable-version", text: s.stable })],
    ["canary", s.canary ? el("strong", { id: "canary-version", text: s.canary }) : "–"],
    ["canary weight", s.canary ? el("span", { id: "canary-weight-value", text: s.canary_weight + " %" }) : "–"],
    ["steps", s.steps && s.steps.length ? el("span", { id: "canary-steps-value", text: s.steps.map((w, i) => i === (s.step || 0) ? "[" + w + "]" : String(w)).join(" → ") + " %" + (s.min_step_players ? ", " + s.min_step_players + " players per arm per step" : "") }) : "–"],
    ["experiment", s.experiment_id ? s.experiment_id + " (canary share " + s.split + " %)" : "–"],
    s.pause_reason ? ["paused because", el("span", { id: "pause-reason", class: "err", text: s.pause_reason })] : null,
    ["generation", String(s.generation)],
    ["updated", when(s.updated_at) + " by " + s.updated_by],
  ];
  put("rollout", el("dl", {}, rows.filter((r) => r).map(([k, v]) => [el("dt", { text: k }), el("dd", {}, v)])));
  document.getElementById("actions").hidden = false;
  document.getElementById("canaryform").hidden = false;
  const stepsLeft = s.steps && (s.step || 0) + 1 < s.steps.length;
  for (const b of document.querySelectorAll("#actions button")) {
    const a = b.dataset.action;
    const allowed = { advance: stepsLeft ? ["canary"] : [], promote: ["canary", "paused"], rollback: ["canary", "paused"], pause: ["canary"], resume: ["paused"] }[a];
    b.disabled = !allowed.includes(s.state);
  }
}

function renderFleet(fleet) {
  if (!fleet.length) {
    put("fleet", el("p", { class: "muted", text: "No gateway instance has reported in the last heartbeat window." }));
    return;
  }
  put("fleet", table(
    ["instance", { label: "gen", num: true }, "serving", "loaded", { label: "sessions", num: true }, "heartbeat"],
    fleet.map((f) => [
      f.instance,
      String(f.generation),
      f.stable + (f.canary ? " + " + f.canary : ""),
      el("span", {}, (f.loaded || []).join(", ") || "–",
        f.loading ? el("span", { class: "muted", text: " (loading " + f.loading + ")" }) : null,
        f.last_error ? el("div", { class: "err", text: f.last_error }) : null),
      String(f.sessions),
      when(f.updated_at),
    ])));
}

function renderHistory(hist) {
  put("history", table(
    ["at", "action", "by", { label: "gen", num: true }, "stable", "canary", "reason"],
    hist.slice().reverse().map((h) => [
      when(h.at), h.action, h.by, String(h.to.generation), h.to.stable,
      h.to.canary ? h.to.canary + " @ " + h.to.canary_weight + " %" : "–", h.reason || "",
    ])));
}

function estimateText(e) {
  if (!e || !e.n) return "–";
  if (e.n < 2) return fmt(e.mean);
  return fmt(e.mean) + " [" + fmt(e.lo) + ", " + fmt(e.hi) + "]";
}

// guardValue shows a guardrail's latency in ms and its rates in percent.
function guardValue(name, x) {
  return name.includes("latency") ? fmt(x, 0) + " ms" : pct(x);
}

// renderReport shows the analysis the learner published. Only the
// always-valid sequential test is shown as a verdict: a fixed-horizon
// p-value read at every refresh is not valid.
function renderReport(r) {
  const rep = r.report, d = r.decision;
  put("experiment-id", rep.experiment_id);
  const g = r.guardrails || {};
  const step = r.step_players || {};
  const meta = el("p", {},
    "automatic promotion ", el("strong", { id: "auto-promote", text: g.auto_promote ? "on" : "off" }),
    el("span", { class: "muted", text: " (as the learner runs it; published " + when(r.at) + " by " + r.by + " at generation " + r.generation + ")" }),
    r.action ? [" · last action ", pill(r.action)] : null,
    " · sample ratio ", rep.srm && rep.srm.checked ? (rep.srm.failed ? el("span", { class: "worse", text: "MISMATCH p " + fmtP(rep.srm.p) }) : el("span", { class: "better", text: "ok p " + fmtP(rep.srm.p) })) : "not checked",
    " · assignment audit ", r.audit && r.audit.wrong ? el("span", { class: "worse", id: "audit", text: r.audit.wrong + " of " + r.audit.checked + " sessions on the wrong arm" }) : el("span", { id: "audit", text: "ok (" + ((r.audit && r.audit.checked) || 0) + " sessions)" }),
    " · players in this step ", (step.stable || 0) + " stable, " + (step.canary || 0) + " canary");
  const arms = table(
    ["arm", "versions", { label: "players", num: true }, { label: "sessions", num: true }, { label: "open", num: true }, "Avg.L [95 % CI]", "Avg.r [95 % CI]"],
    [rep.stable, rep.canary].map((a) => [
      el("span", {}, el("span", { class: "swatch " + a.arm }), a.arm),
      (a.versions || []).join(", ") || "–",
      String(a.players ?? "–"), String(a.avg_l.n), String(a.open),
      el("td", { id: "avg-l-" + a.arm, text: estimateText(a.avg_l) }),
      estimateText(a.avg_r),
    ]));
  const comp = table(
    ["metric", { label: "canary − stable", num: true }, { label: "mSPRT p (always valid)", num: true }, "always-valid CI", "verdict"],
    [["Avg.L", rep.avg_l], ["Avg.r", rep.avg_r]].map(([name, c]) => {
      const s = c.sequential;
      let verdict = el("span", { class: "muted", text: "no difference shown" });
      if (s.better) verdict = el("span", { class: "better", text: "canary better" });
      if (s.worse) verdict = el("span", { class: "worse", text: "canary worse" });
      return [
        name,
        c.valid ? (c.diff >= 0 ? "+" : "") + fmt(c.diff) : "–",
        fmtP(s.p),
        s.looks > 0 ? "[" + fmt(s.lo) + ", " + fmt(s.hi) + "]" : "–",
        el("td", { id: "verdict-" + name.replace(".", "").toLowerCase() }, verdict),
      ];
    }));
  const checks = table(
    ["guardrail", { label: "stable", num: true }, { label: "canary", num: true }, { label: "limit", num: true }, "state"],
    (d.checks || []).map((c) => [
      c.name, guardValue(c.name, c.stable), guardValue(c.name, c.canary), guardValue(c.name, c.limit),
      !c.judged ? el("span", { class: "muted", text: "not judged" }) :
        c.breached ? el("span", { class: "worse", text: "BREACHED" }) : el("span", { class: "better", text: "ok" }),
    ]));
  put("report", meta, arms, el("h3", { text: "Comparison (always valid)" }), comp,
    el("h3", {}, "Decision ", pill(d.verdict), " ", el("span", { class: "muted", text: d.reason })), checks);
}

function renderTimeline(tl) {
  const byArm = { stable: [], canary: [] };
  for (const p of tl.points) {
    if (!byArm[p.arm] || p.avg_l.n === 0) continue;
    byArm[p.arm].push({ x: Date.parse(p.at), y: p.avg_l.mean, lo: p.avg_l.lo, hi: p.avg_l.hi, n: p.avg_l.n });
  }
  const series = Object.entries(byArm).filter(([, pts]) => pts.length)
    .map(([arm, points]) => ({ name: arm, color: ARM_COLOR[arm], points }));
  if (!series.length) {
    put("timeline", el("p", { class: "muted", text: "No session of this experiment has ended yet." }));
    return;
  }
  put("timeline", chart({ series, time: true, xLabel: "time (UTC)", yLabel: "Avg.L (exchanges)", band: true, width: 1100, height: 300 }));
}

function renderModels(list) {
  const names = new Set();
  for (const v of list.versions) for (const k of Object.keys(v.metrics || {})) names.add(k);
  const metrics = [...names].sort().slice(0, 6);
  put("models", table(
    ["version", "serving", "algorithm", "parent", "created"].concat(metrics.map((m) => ({ label: m, num: true }))),
    list.versions.slice().reverse().map((v) => [
      el("strong", { text: v.version }),
      v.serving ? pill(v.serving, v.serving === "canary" ? "canary" : "steady") : "",
      v.algorithm, v.parent || "–", when(v.created_at),
    ].concat(metrics.map((m) => fmt((v.metrics || {})[m], 3))))));
}

// candidates are the canary, the versions newer than stable, and stable
// itself for reference; at most four.
function candidates(list, state) {
  const vs = list.versions;
  const out = [];
  const add = (v) => { if (v && !out.includes(v) && vs.some((m) => m.version === v)) out.push(v); };
  add(state.canary);
  const si = vs.findIndex((m) => m.version === state.stable);
  for (let i = vs.length - 1; i > si; i--) add(vs[i].version);
  add(state.stable);
  return out.slice(0, 4);
}

async function renderCurves(list, state) {
  const got = [];
  for (const v of candidates(list, state)) {
    try {
      got.push(await api("/models/" + encodeURIComponent(v) + "/curves"));
    } catch (e) {
      if (e.status !== 404) throw e;
    }
  }
  if (!got.length) {
    put("curves", el("p", { class: "muted", text: "No candidate has training curves in the registry." }));
    return;
  }
  const byName = new Map();
  got.forEach((cv, i) => {
    for (const s of cv.series || []) {
      if (!byName.has(s.name)) byName.set(s.name, { x: cv.x || "step", series: [] });
      byName.get(s.name).series.push({
        name: cv.version, color: PALETTE[i % PALETTE.length],
        points: (s.points || []).map((p) => ({ x: p.x, y: p.y })),
      });
    }
  });
  const charts = [...byName.entries()].map(([name, c]) =>
    el("div", { class: "chart" }, el("h3", { text: name }),
      chart({ series: c.series, xLabel: c.x, yLabel: name, width: 540, height: 240 })));
  put("curves", el("div", { class: "curves" }, charts));
}

// --- SVG charts ------------------------------------------------------------

function niceStep(span, count) {
  const raw = span / Math.max(1, count);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

function ticks(lo, hi, count) {
  const step = niceStep(hi - lo, count);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
  return out;
}

const TIME_STEPS = [1, 5, 15, 30, 60, 300, 900, 1800, 3600, 10800, 21600, 43200, 86400].map((s) => s * 1000);

function timeTicks(lo, hi, count) {
  const raw = (hi - lo) / Math.max(1, count);
  const step = TIME_STEPS.find((s) => s >= raw) || TIME_STEPS[TIME_STEPS.length - 1];
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi; v += step) out.push(v);
  return { values: out, step };
}

function timeLabel(ms, step) {
  const iso = new Date(ms).toISOString();
  return step < 60000 ? iso.slice(11, 19) : iso.slice(11, 16);
}

function extent(values) {
  let lo = Infinity, hi = -Infinity;
  for (const v of values) if (Number.isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  if (lo === Infinity) return [0, 1];
  if (lo === hi) { lo -= 0.5; hi += 0.5; }
  return [lo, hi];
}

// BAND_MIN_N is how many observations a point needs before its CI band
// counts for the y range: the first few bands are very wide, and would
// flatten everything else. They are still drawn, clipped to the plot.
const BAND_MIN_N = 10;
let clipSeq = 0;

// chart draws series of {x, y[, lo, hi, n]} points as lines, with the lo–hi
// band shaded when opts.band is set, and a legend.
function chart(opts) {
  const W = opts.width, H = opts.height, m = { l: 56, r: 16, t: 24, b: 40 };
  const pts = opts.series.flatMap((s) => s.points);
  const [x0, x1] = extent(pts.map((p) => p.x));
  let [y0, y1] = extent(pts.flatMap((p) =>
    opts.band && !(p.n < BAND_MIN_N) ? [p.y, p.lo, p.hi] : [p.y]));
  const pad = (y1 - y0) * 0.08;
  y0 -= pad; y1 += pad;
  const X = (v) => m.l + (v - x0) / (x1 - x0) * (W - m.l - m.r);
  const Y = (v) => H - m.b - (v - y0) / (y1 - y0) * (H - m.t - m.b);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": opts.yLabel + " by " + opts.xLabel });
  const clip = "plot-clip-" + (++clipSeq);
  root.append(svg("clipPath", { id: clip },
    svg("rect", { x: m.l, y: m.t, width: W - m.l - m.r, height: H - m.t - m.b })));
  const plot = svg("g", { "clip-path": `url(#${clip})` });

  const yt = ticks(y0, y1, 7);
  for (const v of yt) {
    root.append(svg("line", { x1: m.l, x2: W - m.r, y1: Y(v), y2: Y(v), stroke: "#e6e9ef" }));
    root.append(svg("text", { x: m.l - 6, y: Y(v) + 4, "text-anchor": "end", "font-size": 11, fill: "#6b7383", text: +v.toPrecision(4) }));
  }
  let xt;
  if (opts.time) {
    const t = timeTicks(x0, x1, 8);
    xt = t.values.map((v) => [v, timeLabel(v, t.step)]);
  } else {
    xt = ticks(x0, x1, 6).map((v) => [v, String(+v.toPrecision(6))]);
  }
  for (const [v, label] of xt) {
    root.append(svg("line", { x1: X(v), x2: X(v), y1: H - m.b, y2: H - m.b + 4, stroke: "#6b7383" }));
    root.append(svg("text", { x: X(v), y: H - m.b + 16, "text-anchor": "middle", "font-size": 11, fill: "#6b7383", text: label }));
  }
  root.append(svg("line", { x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b, stroke: "#6b7383" }));
  root.append(svg("line", { x1: m.l, x2: m.l, y1: m.t, y2: H - m.b, stroke: "#6b7383" }));
  root.append(svg("text", { x: (m.l + W - m.r) / 2, y: H - 6, "text-anchor": "middle", "font-size": 12, fill: "#1d2330", text: opts.xLabel }));
  root.append(svg("text", { x: 14, y: (m.t + H - m.b) / 2, "text-anchor": "middle", "font-size": 12, fill: "#1d2330",
    transform: `rotate(-90 14 ${(m.t + H - m.b) / 2})`, text: opts.yLabel }));

  for (const s of opts.series) {
    if (opts.band) {
      const upper = s.points.map((p) => `${X(p.x).toFixed(1)},${Y(p.hi).toFixed(1)}`);
      const lower = s.points.slice().reverse().map((p) => `${X(p.x).toFixed(1)},${Y(p.lo).toFixed(1)}`);
      plot.append(svg("polygon", { points: upper.concat(lower).join(" "), fill: s.color, "fill-opacity": 0.15, stroke: "none" }));
    }
    const d = s.points.map((p, i) => (i ? "L" : "M") + X(p.x).toFixed(1) + "," + Y(p.y).toFixed(1)).join(" ");
    plot.append(svg("path", { d, fill: "none", stroke: s.color, "stroke-width": 2, "data-series": s.name }));
    if (s.points.length === 1) {
      plot.append(svg("circle", { cx: X(s.points[0].x), cy: Y(s.points[0].y), r: 3, fill: s.color }));
    }
  }
  root.append(plot);
  opts.series.forEach((s, i) => {
    const lx = m.l + 8 + i * 120;
    root.append(svg("rect", { x: lx, y: 6, width: 12, height: 12, rx: 2, fill: s.color }));
    root.append(svg("text", { x: lx + 16, y: 16, "font-size": 12, fill: "#1d2330", text: s.name }));
  });
  return root;
}

// --- refresh loop ------------------------------------------------------------

async function section(name, fn) {
  try {
    await fn();
    return true;
  } catch (e) {
    setStatus(name + ": " + e.message, true);
    if (e.status === 401 || e.status === 403) throw e;
    return false;
  }
}

function setStatus(text, bad) {
  const s = document.getElementById("status");
  s.textContent = text;
  s.className = bad ? "err" : "muted";
}

async function refresh() {
  if (!sessionStorage.getItem(KEY_ITEM)) {
    setStatus("no key", true);
    return;
  }
  let st = null, models = null, ok = true;
  try {
    ok = await section("rollout", async () => {
      st = await api("/rollout");
      renderRollout(st);
      renderFleet(st.fleet);
      renderHistory(st.history);
    }) && ok;
    ok = await section("models", async () => {
      models = await api("/models");
      renderModels(models);
    }) && ok;
    if (st && st.state.experiment_id) {
      const q = "?experiment=" + encodeURIComponent(st.state.experiment_id);
      ok = await section("report", async () => {
        try {
          renderReport(await api("/report" + q));
        } catch (e) {
          if (e.status !== 404) throw e;
          put("report", el("p", { class: "muted", text: "The learner has not published an analysis of this experiment yet." }));
          put("timeline");
          return;
        }
        renderTimeline(await api("/timeline" + q));
      }) && ok;
    } else if (st) {
      put("experiment-id", "");
      put("report", el("p", { class: "muted", text: "No experiment is running: the deployment is " + st.state.state + "." }));
      put("timeline");
    }
    if (st && models) ok = await section("curves", () => renderCurves(models, st.state)) && ok;
  } catch (e) {
    return;
  }
  if (ok) setStatus("updated " + new Date().toISOString().slice(11, 19) + " UTC", false);
}

// change posts a rollout change as a compare-and-set on the generation
// the page shows, so it fails if someone changed the rollout meanwhile.
async function change(action, body) {
  if (!current) return;
  if (!window.confirm(`${action} ${DEPLOYMENT} at generation ${current.generation}?`)) return;
  try {
    const ch = await api("/rollout/" + action, { method: "POST", body: JSON.stringify({ ...body, generation: current.generation }) });
    setStatus(`${action}: now generation ${ch.to.generation} (${ch.to.state})`, false);
  } catch (e) {
    setStatus(action + ": " + e.message, true);
  }
  await refresh();
}

function act(action) { return change(action, {}); }

// startCanary starts or ramps a canary from the form: a version with a
// weight, or with steps (and players per arm per step).
function startCanary(ev) {
  ev.preventDefault();
  const v = (id) => document.getElementById(id).value.trim();
  const body = { version: v("canary-version-input") };
  if (v("canary-steps")) body.steps = v("canary-steps").split(",").map((x) => parseInt(x, 10));
  else body.weight = parseInt(v("canary-weight"), 10);
  if (v("canary-min-players")) body.min_step_players = parseInt(v("canary-min-players"), 10);
  return change("canary", body);
}

function init() {
  document.getElementById("deployment").textContent = "deployment " + DEPLOYMENT;
  // A key may come in the fragment (#key=...), which is never sent to the
  // server; it is moved to sessionStorage and removed from the address.
  const m = location.hash.match(/key=([^&]+)/);
  if (m) {
    sessionStorage.setItem(KEY_ITEM, decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  document.getElementById("keyform").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const k = document.getElementById("key").value.trim();
    if (k) sessionStorage.setItem(KEY_ITEM, k);
    document.getElementById("key").value = "";
    refresh();
  });
  document.getElementById("forget").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_ITEM);
    location.reload();
  });
  for (const b of document.querySelectorAll("#actions button")) {
    b.addEventListener("click", () => act(b.dataset.action));
  }
  document.getElementById("canaryform").addEventListener("submit", startCanary);
  refresh();
  setInterval(refresh, REFRESH_MS);
}

init();
