// The hetps dashboard: polls /api/status once a second and redraws the tables and charts.
// Charts are uPlot, bundled by the build from the npm registry; nothing loads from the network.
"use strict";

const COLORS = ["#4a90d9", "#e67e22", "#27ae60", "#8e44ad", "#c0392b", "#16a085", "#d35400",
                "#2c3e50", "#f1c40f", "#7f8c8d"];
const charts = {};  // id -> {plot, key}

function fmtBytes(b) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let u = 0;
  while (b >= 1024 && u < units.length - 1) { b /= 1024; u++; }
  return u === 0 ? `${b} B` : `${b.toFixed(1)} ${units[u]}`;
}
const num = (v, digits = 1) => (typeof v === "number" ? v.toFixed(digits) : "–");

// Tables show PAGE_ROWS rows a page, with a pager below them, so that 100+ workers or clients
// stay readable; the page a table is on survives the redraws.
const PAGE_ROWS = 25;
const pages = {};  // table id -> page index

function pager(id, total) {
  const count = Math.max(1, Math.ceil(total / PAGE_ROWS));
  const page = Math.min(pages[id] || 0, count - 1);
  pages[id] = page;
  let el = document.getElementById(`${id}-pager`);
  if (!el) {
    el = document.createElement("div");
    el.id = `${id}-pager`;
    el.className = "pager";
    document.getElementById(id).after(el);
  }
  el.hidden = total <= PAGE_ROWS;
  el.replaceChildren();
  const button = (text, to) => {
    const b = document.createElement("button");
    b.textContent = text;
    b.disabled = to < 0 || to >= count || to === page;
    b.onclick = () => { pages[id] = to; if (last) render(last); };
    return b;
  };
  const label = document.createElement("span");
  label.textContent = `rows ${page * PAGE_ROWS + 1}–${Math.min(total, (page + 1) * PAGE_ROWS)} of ${total}`;
  el.append(button("«", 0), button("‹", page - 1), label, button("›", page + 1), button("»", count - 1));
  return page;
}

function fillTable(id, allRows, cells, rowClass) {
  const page = pager(id, allRows.length);
  const rows = allRows.slice(page * PAGE_ROWS, (page + 1) * PAGE_ROWS);
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren(...rows.map((r) => {
    const tr = document.createElement("tr");
    tr.className = rowClass ? rowClass(r) : "";
    for (const c of cells(r)) {
      const td = document.createElement("td");
      if (typeof c === "object") { td.textContent = c.text; td.className = c.cls; } else { td.textContent = c; }
      tr.appendChild(td);
    }
    if (r.rank !== undefined) tr.dataset.rank = r.rank;
    return tr;
  }));
}

// Creates the uPlot chart `id` (or recreates it when its series change) and sets its data.
function plot(id, key, makeOpts, data) {
  const el = document.getElementById(id);
  let c = charts[id];
  if (!c || c.key !== key) {
    if (c) c.plot.destroy();
    el.replaceChildren();
    const opts = makeOpts();
    opts.width = Math.max(300, el.clientWidth);
    opts.height = 220;
    c = charts[id] = { key, plot: new uPlot(opts, data, el) };
  } else {
    c.plot.setData(data);
  }
}

// One line per worker; beyond MAX_LINES workers, the slowest, median and fastest clock.
const MAX_LINES = 16;
function drawClocks(s) {
  const ranks = Object.keys(s.history.clock).sort((a, b) => a - b);
  if (ranks.length > MAX_LINES) {
    const series = s.history.t.map((_, i) => ranks.map((r) => s.history.clock[r][i])
      .filter((v) => typeof v === "number").sort((a, b) => a - b));
    const pick = (f) => series.map((v) => (v.length ? v[Math.floor(f * (v.length - 1))] : null));
    plot("chart-clocks", "spread", () => ({
      scales: { x: { time: false } },
      axes: [{ label: "seconds" }, { label: "clock" }],
      series: [{ label: "t (s)" },
               { label: `slowest of ${ranks.length} workers`, stroke: COLORS[4], width: 2 },
               { label: "median", stroke: COLORS[0], width: 2 },
               { label: "fastest", stroke: COLORS[2], width: 2 }],
    }), [s.history.t, pick(0), pick(0.5), pick(1)]);
    return;
  }
  const data = [s.history.t, ...ranks.map((r) => s.history.clock[r])];
  plot("chart-clocks", ranks.join(","), () => ({
    scales: { x: { time: false } },
    axes: [{ label: "seconds" }, { label: "clock" }],
    series: [{ label: "t (s)" }, ...ranks.map((r, i) => ({
      label: `worker ${r}`, stroke: COLORS[i % COLORS.length], width: 2 }))],
  }), data);
}

function bars(id, labels, values, label, color) {
  const xs = labels.map((_, i) => i);
  plot(id, labels.join(","), () => ({
    scales: { x: { time: false, range: [-0.5, Math.max(labels.length - 0.5, 0.5)] },
              y: { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] } },
    axes: [{ values: (u, ticks) => ticks.map((t) => (labels[t] !== undefined && Number.isInteger(t) ? labels[t] : "")) },
           { label }],
    series: [{}, { label, fill: color + "aa", stroke: color,
                   paths: uPlot.paths.bars({ size: [0.7, 60] }), points: { show: false } }],
    legend: { show: false },
  }), [xs, values]);
}

function drawStaleness(s) {
  const counts = s.staleness_histogram.counts;
  const labels = counts.map((_, i) => (s.staleness_histogram.last_bucket_open && i === counts.length - 1 ? `${i}+` : `${i}`));
  bars("chart-staleness", labels, counts, "pushes", "#4a90d9");
}

function drawLayers(s) {
  bars("chart-layers", s.layers.map((l) => `layer ${l.layer}`), s.layers.map((l) => l.pushes_per_min),
       "pushes / min", "#27ae60");
}

// Iteration-time EWMA per worker against the straggler threshold (factor x the others' median).
// Workers are named by rank everywhere ("worker 1"), as in the tables; the flags come by node id.
function drawStragglers(s) {
  const rankOf = new Map(s.workers.map((w) => [w.id, w.rank]));
  const workerName = (id) => (rankOf.has(id) ? `worker ${rankOf.get(id)}` : `node ${id}`);
  const el = document.getElementById("chart-stragglers");
  const live = s.workers.filter((w) => w.state === "alive" && typeof w.iteration_ms === "number");
  const times = live.map((w) => w.iteration_ms).sort((a, b) => a - b);
  const median = times.length ? times[Math.floor((times.length - 1) / 2)] : 0;
  const threshold = s.cluster.straggler_factor * median;
  const max = Math.max(threshold, ...times, 1e-9) * 1.1;
  const wrap = document.createElement("div");
  wrap.className = "bars";
  // With many workers: the flagged and the slowest, MAX_LINES bars at most.
  const shown = live.length <= MAX_LINES ? live
    : [...live].sort((a, b) => (b.straggler - a.straggler) || (b.iteration_ms - a.iteration_ms))
      .slice(0, MAX_LINES).sort((a, b) => a.rank - b.rank);
  for (const w of shown) {
    const row = document.createElement("div");
    row.className = "bar-row";
    row.dataset.rank = w.rank;
    row.innerHTML = `<span class="bar-label">worker ${w.rank}</span>` +
      `<span class="bar-track"><span class="bar${w.straggler ? " flagged" : ""}" style="width:${(100 * w.iteration_ms / max).toFixed(1)}%; display:block"></span>` +
      `<span class="threshold" style="left:${(100 * threshold / max).toFixed(1)}%"></span></span>` +
      `<span class="bar-value">${w.iteration_ms.toFixed(1)} ms${w.straggler ? " ⚑ " + w.straggler_reason : ""}</span>`;
    wrap.appendChild(row);
  }
  const note = document.createElement("div");
  note.className = "note";
  note.textContent = (shown.length < live.length ? `the ${shown.length} slowest of ${live.length} workers; ` : "") +
                     `red line: straggler threshold ${s.cluster.straggler_factor}× the median (${threshold.toFixed(1)} ms); ` +
                     `flagged: ${s.cluster.stragglers.length ? s.cluster.stragglers.map(workerName).join(", ") : "none"}`;
  wrap.appendChild(note);
  el.replaceChildren(wrap);
}

function drawCurve(s) {
  // Loss and accuracy by clock; each worker's points, merged on the clock axis.
  const byClock = new Map();
  for (const p of s.curve) {
    const e = byClock.get(p.clock) || { loss: [], accuracy: [] };
    if (typeof p.loss === "number") e.loss.push(p.loss);
    if (typeof p.accuracy === "number") e.accuracy.push(p.accuracy);
    byClock.set(p.clock, e);
  }
  const clocks = [...byClock.keys()].sort((a, b) => a - b);
  const mean = (a) => (a.length ? a.reduce((x, y) => x + y, 0) / a.length : null);
  const loss = clocks.map((c) => mean(byClock.get(c).loss));
  const acc = clocks.map((c) => mean(byClock.get(c).accuracy));
  plot("chart-curve", "curve", () => ({
    scales: { x: { time: false }, acc: { range: [0, 1] } },
    axes: [{ label: "clock" }, { label: "loss" }, { side: 1, scale: "acc", label: "accuracy", grid: { show: false } }],
    series: [{ label: "clock" },
             { label: "loss (mean of workers)", stroke: "#e67e22", width: 2, spanGaps: true },
             { label: "test accuracy", stroke: "#27ae60", width: 2, scale: "acc", spanGaps: true,
               points: { show: true, size: 6 } }],
  }), [clocks, loss, acc]);
}

// Federated rounds (present when edge clients check in): counts by state, the evaluator's
// accuracy against time, and every client (a state filter and pages for 100+ clients).
const STATES = ["idle", "training", "uploaded", "away", "left"];
let stateFilter = "";
function drawFederated(s) {
  const f = s.federated;
  const section = document.getElementById("federated");
  section.hidden = !f;
  if (!f) return;
  const agg = f.rounds > 0 ? `${f.applied}/${f.rounds}` : `${f.applied}`;
  document.getElementById("fed-summary").textContent =
    `${f.mode === "async" ? `asynchronous, ${f.concurrency} at once` : "sampled rounds"} · ` +
    `selection ${f.selection} · aggregations ${agg} · uploads kept ${f.kept}, dropped ${f.dropped}` +
    ` · uplink ${fmtBytes(f.bytes_up)} · downlink ${fmtBytes(f.bytes_down)}` +
    (f.measured.length ? ` · test accuracy ${f.measured[f.measured.length - 1][2].toFixed(4)}` : "");
  const chips = document.getElementById("fed-states");
  chips.replaceChildren(...["", ...STATES, "evaluator"].map((state) => {
    const b = document.createElement("button");
    const n = state === "" ? Object.keys(f.per_client).length : f.clients[state];
    b.textContent = `${state || "all"} ${n}`;
    b.className = `chip ${state}${state === stateFilter ? " on" : ""}`;
    b.disabled = state === "evaluator";
    b.onclick = () => { stateFilter = state; pages["fed-clients"] = 0; if (last) render(last); };
    return b;
  }));
  const rows = Object.entries(f.per_client).map(([rank, c]) => ({ rank: Number(rank), ...c }))
    .filter((c) => !stateFilter || c.state === stateFilter).sort((a, b) => a.rank - b.rank);
  fillTable("fed-clients", rows, (c) => [c.rank, { text: c.state, cls: `state ${c.state}` },
    c.selected, c.kept, c.missed], (c) => (c.state === "left" ? "gone" : ""));
  if (typeof uPlot !== "undefined") {
    plot("chart-fed", "fed", () => ({
      scales: { x: { time: false }, y: { range: [0, 1] } },
      axes: [{ label: "seconds since the first round" }, { label: "test accuracy" }],
      series: [{ label: "t (s)" }, { label: "test accuracy (evaluator)", stroke: "#27ae60", width: 2,
                                    points: { show: true, size: 5 } }],
    }), [f.measured.map((m) => m[1]), f.measured.map((m) => m[2])]);
  }
}

// How a worker's large payloads reach the servers: the distinct ways over its server ranks.
function via(transports) {
  return transports && transports.length ? [...new Set(transports)].join("+") : "–";
}

let last = null;  // the latest status, to redraw at once when a pager or filter is clicked
function render(s) {
  last = s;
  const c = s.cluster;
  document.getElementById("summary").textContent =
    `${c.consistency || "–"} · ${c.workers} workers · ${c.servers} servers · clocks ${c.min_clock}..${c.max_clock}` +
    ` · quorum ${c.quorum} · stragglers ${c.stragglers.length} · up ${c.uptime_s.toFixed(0)} s`;
  fillTable("workers", [...s.workers].sort((a, b) => a.rank - b.rank), (w) => [
    w.rank, w.id, w.state, w.clock, num(w.iteration_ms), num(w.iteration_ms_stddev), num(w.wait_ms),
    `${num(w.staleness, 2)} (max ${w.staleness_max})`, fmtBytes(w.bytes_pushed), fmtBytes(w.bytes_pulled),
    via(w.transports), num(w.heartbeat_age_ms, 0), num(w.metrics.loss, 4), num(w.metrics.accuracy, 4),
    { text: w.straggler ? `STRAGGLER (${w.straggler_reason})` : "", cls: "flag" },
  ], (w) => (w.straggler ? "straggler" : w.state !== "alive" ? "gone" : ""));
  fillTable("servers", s.servers, (v) => [
    v.rank, v.id, v.state, v.partitions, fmtBytes(v.bytes_held), num(v.requests_per_s, 0),
    v.parked_pulls, v.parked_clocks, v.address]);
  // Each server's sparse tables (docs/tables.md), a row per server and table.
  const tables = s.servers.flatMap((v) => (v.tables || []).map((t) => ({ server: v.rank, ...t })));
  document.getElementById("tables-section").hidden = tables.length === 0;
  fillTable("tables", tables, (t) => [
    t.server, t.name, t.rows, fmtBytes(t.bytes), `${num(t.bytes_per_row, 0)} (${t.row_bytes} own)`,
    t.hits + t.misses ? num(t.hits / (t.hits + t.misses), 3) : "–", t.created, t.evicted,
    t.expired, t.admitted, t.dropped, t.refused]);
  // The servers' figures per layer, with the layer-wise schedule's (docs/layer-schedules.md).
  const plan = s.layer_schedule || { layers: [] };
  const planned = new Map(plan.layers.map((l) => [l.layer, l]));
  const served = new Map(s.layers.map((l) => [l.layer, l]));
  const layerIds = [...new Set([...served.keys(), ...planned.keys()])].sort((a, b) => a - b);
  document.getElementById("layer-schedule").textContent = plan.spec
    ? `layer schedule ${plan.spec}: ${fmtBytes(plan.deferred_bytes)} saved` : "";
  fillTable("layers", layerIds, (id) => {
    const l = served.get(id), p = planned.get(id);
    return [id, l ? l.pushes : "–", l ? num(l.pushes_per_min, 0) : "–", l ? fmtBytes(l.bytes) : "–",
      l ? num(l.mean_staleness, 2) : "–", l ? l.max_staleness : "–", p ? p.period : "–",
      p && p.relative_gradient >= 0 ? num(p.relative_gradient, 4) : "–",
      p ? fmtBytes(p.deferred_bytes) : "–"];
  });
  if (typeof uPlot === "undefined") {
    document.getElementById("error").hidden = false;
    document.getElementById("error").textContent =
      "charting library missing: build with deploy/install_deps.sh run first (it bundles uPlot)";
  } else {
    drawClocks(s);
    drawStaleness(s);
    drawLayers(s);
    drawCurve(s);
  }
  drawStragglers(s);
  drawFederated(s);
  document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
}

async function poll() {
  try {
    const r = await fetch("api/status", { cache: "no-store" });
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    render(await r.json());
    document.getElementById("error").hidden = typeof uPlot === "undefined" ? false : true;
  } catch (e) {
    const el = document.getElementById("error");
    el.hidden = false;
    el.textContent = `scheduler unreachable: ${e.message}`;
  }
  setTimeout(poll, 1000);
}
poll();
