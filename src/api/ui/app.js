// vramd's live page: reads the REST API and the alert stream of the daemon
// that served it (same origin, so basic auth and TLS carry over) and draws
// with plain DOM and SVG. Nothing inline: the page's CSP forbids it.
"use strict";

const REFRESH_MS = 5000;
const RECENT_LIMIT = 50;
const SVG = "http://www.w3.org/2000/svg";
const SEGMENTS = [
  ["driver", "driver-reserved"],
  ["outside", "outside any allocator"],
  ["traced", "driver allocations, no reporter"],
  ["live", "live tensors"],
  ["cache", "allocator cache"],
  ["fragmented", "fragmented"],
  ["free", "free"],
];

const state = { devices: [], details: {}, history: {}, alerts: [], recent: [], ooms: [], open: new Set() };
let refreshing = false;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value !== undefined && value !== null) node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value !== undefined && value !== null) node.setAttribute(key, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : String(child));
  return node;
}

function bytes(value) {
  if (value === undefined || value === null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let amount = value;
  let unit = 0;
  while (Math.abs(amount) >= 1024 && unit < units.length - 1) { amount /= 1024; unit += 1; }
  return (unit === 0 ? amount : amount.toFixed(1)) + " " + units[unit];
}

function duration(seconds) {
  if (seconds === undefined || seconds === null) return "–";
  if (seconds < 90) return Math.round(seconds) + " s";
  if (seconds < 5400) return Math.round(seconds / 60) + " min";
  if (seconds < 172800) return (seconds / 3600).toFixed(1) + " h";
  return (seconds / 86400).toFixed(1) + " d";
}

function percent(part, whole) {
  return whole > 0 ? ((100 * part) / whole).toFixed(1) + "%" : "–";
}

function windowSeconds(text) {
  const match = /^(\d+)([mh])$/.exec(text);
  return match ? Number(match[1]) * (match[2] === "h" ? 3600 : 60) : 900;
}

function setStatus(text) {
  document.getElementById("status").textContent = text;
}

async function getJson(path) {
  const response = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" } });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(path + ": " + response.status + " " + (body.message || ""));
  return body;
}

// The waterfall of one device, each part in bytes; the parts add up to
// total: driver-reserved is what total leaves after used and free.
function waterfall(accounting, memory) {
  const source = accounting || memory;
  if (!source) return null;
  const total = source.total_bytes;
  const used = source.used_bytes;
  const free = source.free_bytes;
  const live = accounting ? accounting.live_tensors_bytes : 0;
  const cache = accounting ? accounting.allocator_cache_bytes : 0;
  const fragmented = accounting ? Math.min(accounting.fragmented_bytes, cache) : 0;
  const inAllocator = Math.min(live + cache, used);
  // The driver trace's view of processes no reporter speaks for: bytes held
  // through cuMemAlloc*/cuMemCreate (PyTorch's reserved), not in any
  // reporter's figures, so it splits what would be "outside" otherwise.
  const held = accounting && accounting.driver_held_bytes !== undefined && accounting.driver_held_bytes !== null
    ? accounting.driver_held_bytes : 0;
  const traced = Math.min(held, used - inAllocator);
  return {
    total,
    parts: {
      driver: Math.max(total - used - free, 0),
      outside: used - inAllocator - traced,
      traced,
      live: Math.min(live, inAllocator),
      cache: Math.max(inAllocator - Math.min(live, inAllocator) - fragmented, 0),
      fragmented: Math.min(fragmented, inAllocator - Math.min(live, inAllocator)),
      free,
    },
  };
}

function memoryBar(device, split) {
  const label = "GPU " + device.index + " memory, " + bytes(split.total) + " total: " +
    SEGMENTS.map(([key, name]) => name + " " + bytes(split.parts[key])).join(", ");
  const bar = svg("svg", { class: "bar", viewBox: "0 0 1000 22", preserveAspectRatio: "none",
    role: "img", "aria-label": label, "data-total": String(split.total) });
  let x = 0;
  for (const [key, name] of SEGMENTS) {
    const value = split.parts[key];
    const width = split.total > 0 ? (1000 * value) / split.total : 0;
    bar.append(svg("rect", { class: "segment seg-" + key, x: x.toFixed(3), y: "0", width: width.toFixed(3),
      height: "22", "data-segment": key, "data-bytes": String(value) },
    svg("title", {}, name + ": " + bytes(value) + " (" + percent(value, split.total) + ")")));
    x += width;
  }
  return bar;
}

function historyChart(device, history, detail) {
  const buckets = (history && history.buckets) || [];
  const total = (device.memory && device.memory.total_bytes) || 0;
  if (buckets.length === 0 || total === 0) return el("p", { class: "muted" }, "No history yet.");
  const from = Date.parse(history.from);
  const to = Date.parse(history.to);
  const span = Math.max(to - from, 1);
  const end = to + span / 4;
  const x = (time) => (1000 * (time - from)) / (end - from);
  const y = (value) => 110 - (100 * value) / total;
  const line = (pick) => buckets
    .filter((bucket) => bucket.used_bytes)
    .map((bucket) => x(Date.parse(bucket.start)).toFixed(1) + "," + y(pick(bucket.used_bytes)).toFixed(1))
    .join(" ");
  const analysis = detail && detail.analysis;
  const floor = Math.min(...buckets.filter((b) => b.used_bytes).map((b) => b.used_bytes.min));
  const last = buckets.filter((b) => b.used_bytes).pop();
  const chart = svg("svg", { class: "chart", viewBox: "0 0 1000 120", preserveAspectRatio: "none", role: "img",
    "aria-label": "GPU " + device.index + " used memory over " + duration(history.window_seconds) +
      ": now " + bytes(last && last.used_bytes.last) + ", floor " + bytes(floor) + " of " + bytes(total) });
  chart.append(svg("line", { class: "total", x1: "0", x2: "1000", y1: y(total), y2: y(total) }));
  chart.append(svg("polyline", { class: "used", points: line((v) => v.last) }));
  chart.append(svg("polyline", { class: "floor", points: line((v) => v.min) }));
  if (analysis && analysis.time_to_exhaustion_seconds !== undefined && analysis.growth_bytes_per_second > 0 && last) {
    const startX = x(Date.parse(last.start));
    const startValue = last.used_bytes.last;
    const seconds = (end - Date.parse(last.start)) / 1000;
    const endValue = Math.min(startValue + analysis.growth_bytes_per_second * seconds, total);
    const endX = endValue >= total
      ? startX + ((total - startValue) / analysis.growth_bytes_per_second) * 1000 * (1000 / (end - from))
      : 1000;
    chart.append(svg("line", { class: "forecast", x1: startX.toFixed(1), y1: y(startValue).toFixed(1),
      x2: Math.min(endX, 1000).toFixed(1), y2: y(endValue).toFixed(1) }));
  }
  for (const leak of (analysis && analysis.leaks) || []) {
    const yLeak = last ? y(last.used_bytes.last) : 10;
    const tip = x(to);
    chart.append(svg("path", { class: "leak", d: "M" + tip + " " + (yLeak - 9) + " l6 -8 h-12 z" },
      svg("title", {}, "leak suspected: pid " + leak.pid)));
  }
  return chart;
}

function markers(detail) {
  const analysis = detail && detail.analysis;
  const list = [];
  if (!analysis) return list;
  if (analysis.time_to_exhaustion_seconds !== undefined) {
    list.push(el("p", { class: "marker forecast" }, "Forecast: full in about " +
      duration(analysis.time_to_exhaustion_seconds) + " at " + bytes(analysis.growth_bytes_per_second) + "/s"));
  }
  for (const leak of analysis.leaks || []) {
    list.push(el("p", { class: "marker leak" }, "Leak suspected: pid " + leak.pid + " grows " +
      bytes(leak.slope_bytes_per_second) + "/s (" + leak.metric + ", +" + bytes(leak.growth_bytes) +
      " over " + duration(leak.window_seconds) + ")"));
  }
  if (analysis.pressure) list.push(el("p", { class: "marker" }, "Pressure: " + analysis.pressure));
  return list;
}

// What the driver trace counted for one process, for the driver-held cell.
function driverSummary(driver) {
  return driver.live_allocations + " live allocations; " + driver.allocations + " allocations, " +
    driver.frees + " frees, " + driver.out_of_memory_failures + " out-of-memory failures (" +
    driver.allocation_retries + " retried)";
}

function processTable(device, detail) {
  const processes = (detail && detail.processes) || [];
  const key = device.uuid;
  const headings = ["PID", "Name", "Pod", "Namespace", "Container", "Used", "Live tensors", "Cache", "Fragmented", "Outside allocator", "Driver-held"];
  const numeric = new Set([0, 5, 6, 7, 8, 9, 10]);
  const table = el("table", {},
    el("caption", {}, "Processes on GPU " + device.index + " (" + processes.length +
      (detail && detail.processes_dropped ? ", " + detail.processes_dropped + " not listed" : "") + ")"),
    el("thead", {}, el("tr", {}, ...headings.map((text, i) => el("th", { scope: "col", class: numeric.has(i) ? "num" : null }, text)))));
  const body = el("tbody");
  const sorted = [...processes].sort((a, b) => (b.used_bytes || 0) - (a.used_bytes || 0));
  for (const process of sorted) {
    const breakdown = process.breakdown || {};
    const cells = [process.pid, process.name || "–", process.pod || "–", process.namespace || "–", process.container || "–",
      bytes(process.used_bytes), bytes(breakdown.live_tensors_bytes), bytes(breakdown.allocator_cache_bytes),
      bytes(breakdown.fragmented_bytes), bytes(breakdown.outside_allocator_bytes),
      process.driver ? bytes(process.driver.allocated_bytes) : "–"];
    const row = el("tr", { "data-pid": String(process.pid) }, ...cells.map((text, i) => el("td", { class: numeric.has(i) ? "num" : null }, text)));
    if (process.driver) row.lastChild.title = driverSummary(process.driver);
    body.append(row);
  }
  table.append(body);
  const details = el("details", { "data-uuid": key }, el("summary", {}, processes.length + " processes"), el("div", { class: "scroll" }, table));
  if (state.open.has(key) || processes.length <= 8) details.open = true;
  details.addEventListener("toggle", () => {
    if (details.open) state.open.add(key); else state.open.delete(key);
  });
  return details;
}

function gpuCard(device) {
  const detail = state.details[device.index];
  const split = waterfall(detail && detail.accounting, device.memory);
  const card = el("article", { class: "gpu" + (device.up ? "" : " down"), "aria-labelledby": "gpu-" + device.index, "data-gpu": String(device.index) },
    el("h3", { id: "gpu-" + device.index }, "GPU " + device.index + ": " + device.name + (device.up ? "" : " (not answering)")));
  if (split) {
    card.append(memoryBar(device, split));
    card.append(el("div", { class: "figures" },
      el("span", {}, "used " + bytes(device.memory.used_bytes) + " of " + bytes(split.total) + " (" + percent(device.memory.used_bytes, split.total) + ")"),
      el("span", {}, "peak " + bytes(device.memory.used_peak_bytes)),
      el("span", {}, "utilization " + (device.gpu_utilization_ratio === undefined ? "–" : Math.round(100 * device.gpu_utilization_ratio) + "%"))));
  } else {
    card.append(el("p", { class: "muted" }, "No memory reading."));
  }
  const history = state.history[device.index];
  card.append(history instanceof Error ? el("p", { class: "muted" }, "History: " + history.message) : historyChart(device, history, detail));
  card.append(...markers(detail));
  card.append(processTable(device, detail));
  return card;
}

function alertItem(alert) {
  const evidence = alert.value === undefined ? null
    : "value " + Number(alert.value).toPrecision(4) + " " + (alert.unit || "") + " (threshold " + alert.threshold + ")";
  return el("article", { class: "alert " + alert.state + " " + alert.severity, "data-rule": alert.rule, "data-state": alert.state },
    el("p", {}, el("strong", {}, alert.state + " · " + alert.severity + " · " + alert.rule), " ", alert.summary || ""),
    alert.description ? el("p", {}, "Evidence: " + alert.description) : null,
    evidence ? el("p", { class: "muted" }, evidence) : null,
    alert.remediation ? el("p", {}, "Remediation: " + alert.remediation) : null,
    el("p", { class: "muted" }, "since " + (alert.firing_since || alert.since || "–")));
}

function renderAlerts() {
  const target = document.getElementById("alerts");
  const active = state.alerts.filter((alert) => alert.state !== "resolved");
  const parts = [el("h3", {}, "Firing and pending (" + active.length + ")")];
  parts.push(active.length ? el("div", { role: "list", "aria-label": "Active alerts" }, ...active.map((alert) => { const item = alertItem(alert); item.setAttribute("role", "listitem"); return item; }))
    : el("p", { class: "muted" }, "Nothing firing."));
  const resolved = state.alerts.filter((alert) => alert.state === "resolved");
  if (resolved.length) {
    parts.push(el("details", {}, el("summary", {}, "Recently resolved (" + resolved.length + ")"), ...resolved.map(alertItem)));
  }
  const recent = state.recent.slice(0, RECENT_LIMIT);
  if (recent.length) {
    parts.push(el("details", {}, el("summary", {}, "Recent changes (" + recent.length + ")"),
      el("ul", {}, ...recent.map((change) => el("li", {}, change.at + ": " + change.alert.id + " " + change.from + " → " + change.alert.state)))));
  }
  target.replaceChildren(...parts);
}

function renderOoms() {
  const target = document.getElementById("ooms");
  if (!state.ooms.length) { target.replaceChildren(el("p", { class: "muted" }, "No OOM events.")); return; }
  const table = el("table", {}, el("caption", {}, "OOM events (" + state.ooms.length + ")"),
    el("thead", {}, el("tr", {}, ...["ID", "GPU", "PID", "At", "Requested", "Free", "Cause", "Snapshot"].map((text) => el("th", { scope: "col" }, text)))));
  const body = el("tbody");
  for (const event of state.ooms) {
    body.append(el("tr", {}, el("td", {}, event.id), el("td", {}, event.gpu), el("td", {}, event.pid === undefined ? "–" : event.pid),
      el("td", {}, event.at), el("td", {}, bytes(event.requested_bytes)), el("td", {}, bytes(event.free_bytes)), el("td", {}, event.cause),
      el("td", {}, event.snapshot_url ? el("a", { href: event.snapshot_url }, "snapshot") : "–")));
  }
  table.append(body);
  target.replaceChildren(el("div", { class: "scroll" }, table));
}

function renderGpus() {
  const target = document.getElementById("gpus");
  target.replaceChildren(...state.devices.map(gpuCard));
}

async function refreshAlerts() {
  const body = await getJson("/api/v1/alerts");
  state.alerts = body.alerts || [];
  renderAlerts();
}

async function refresh() {
  if (refreshing) return;
  refreshing = true;
  const range = document.getElementById("window").value;
  const step = Math.max(1, Math.round(windowSeconds(range) / 120)) + "s";
  try {
    const list = await getJson("/api/v1/devices");
    state.devices = list.devices || [];
    await Promise.all(state.devices.flatMap((device) => [
      getJson("/api/v1/devices/" + device.index).then((detail) => { state.details[device.index] = detail; }),
      getJson("/api/v1/devices/" + device.index + "/history?window=" + range + "&step=" + step)
        .then((history) => { state.history[device.index] = history; }, (error) => { state.history[device.index] = error; }),
    ]));
    const [alerts, ooms] = await Promise.all([getJson("/api/v1/alerts"), getJson("/api/v1/oom-events")]);
    state.alerts = alerts.alerts || [];
    state.ooms = ooms.events || [];
    renderGpus();
    renderAlerts();
    renderOoms();
    setStatus("Updated " + new Date().toLocaleTimeString() + " · " + state.devices.length + " GPUs");
    if (!document.body.dataset.drawn) {
      performance.mark("vramd-data-drawn");
      document.body.dataset.drawn = "1";
    }
  } catch (error) {
    setStatus("Update failed: " + error.message);
  } finally {
    refreshing = false;
  }
}

function listen() {
  if (typeof EventSource === "undefined") return;
  const stream = new EventSource("/api/v1/alerts/stream");
  const onChange = (event) => {
    try {
      const change = JSON.parse(event.data);
      state.recent.unshift({ at: new Date().toLocaleTimeString(), from: change.from, alert: change.alert });
      state.recent.length = Math.min(state.recent.length, RECENT_LIMIT);
    } catch (_) {
      // An unreadable event still means the alerts changed.
    }
    refreshAlerts().catch((error) => setStatus("Alerts failed: " + error.message));
  };
  for (const name of ["pending", "firing", "resolved", "lagged"]) stream.addEventListener(name, onChange);
  stream.addEventListener("open", () => document.body.setAttribute("data-stream", "open"));
  stream.addEventListener("error", () => document.body.setAttribute("data-stream", "reconnecting"));
}

function start() {
  document.getElementById("window").addEventListener("change", refresh);
  refresh();
  setInterval(refresh, REFRESH_MS);
  listen();
}

document.addEventListener("DOMContentLoaded", start);
