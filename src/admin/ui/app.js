// floodgate status page. Asks for the admin token once (kept in this tab's session storage),
// then reads GET /admin/status every second — the 50 tenants it shows, chosen and searched by
// the server (the table's order and the filter box go into the query), so the page stays
// light whatever the number of tenants. Every value is written as text (no HTML from
// data), and nothing is fetched from anywhere but this admin listener.
"use strict";

const TOKEN_KEY = "floodgate-admin-token";
const $ = (id) => document.getElementById(id);
let sortKey = "refused";
let sortDesc = true;
let timer = null;
let last = null;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function fmt(n, digits) {
  if (n === null || n === undefined) return "–";
  if (typeof n !== "number") return String(n);
  const d = digits === undefined ? (Math.abs(n) >= 100 ? 0 : 1) : digits;
  return n.toLocaleString("en-US", { maximumFractionDigits: d, minimumFractionDigits: 0 });
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return fmt(n, i === 0 ? 0 : 1) + " " + units[i];
}

function gauge(fraction, mark) {
  const g = el("div", { class: "gauge" });
  const fill = el("div", { class: "fill" });
  const f = Math.max(0, Math.min(1, fraction));
  fill.style.width = (f * 100).toFixed(1) + "%";
  if (f > 0.9) fill.classList.add("bad"); else if (f > 0.7) fill.classList.add("warn");
  g.append(fill);
  if (mark !== undefined) {
    const m = el("div", { class: "mark" });
    m.style.left = (Math.max(0, Math.min(1, mark)) * 100).toFixed(1) + "%";
    g.append(m);
  }
  return g;
}

// A bucket as a bar of its tokens available against its burst.
function bucketBar(bucket, unit) {
  if (!bucket) return el("span", { class: "muted" }, "unlimited");
  const used = 1 - bucket.available / bucket.burst;
  const wrap = el("div", { class: "bar", "data-level": String(bucket.available) });
  wrap.append(gauge(used), el("span", {}, fmt(bucket.available, 0) + " / " + fmt(bucket.burst, 0) + " " + unit));
  wrap.title = fmt(bucket.per_sec, 0) + " " + unit + "/s; bar = share of the burst spent";
  return wrap;
}

// Calendar quotas (a tenant's, or the global ones): one bar per window and dimension, what the window used of it.
function quotaBars(quotas) {
  if (!quotas.length) return el("span", { class: "muted" }, "none");
  const cell = el("div", { class: "quotas" });
  for (const q of quotas) {
    const unit = q.dimension === "records" ? "rec" : "B";
    const wrap = el("div", { class: "bar", "data-quota": q.window + "-" + q.dimension });
    wrap.append(gauge(q.used / q.limit), el("span", {}, q.window + ": " + fmt(q.used, 0) + " / " + fmt(q.limit, 0) + " " + unit));
    wrap.title = "turns in " + fmt(q.reset_in_s / 3600, 1) + " h; bar = share of the window's quota used";
    cell.append(wrap);
  }
  return cell;
}

function sparkline(history) {
  const ns = "http://www.w3.org/2000/svg";
  const w = 120, h = 28;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  const max = Math.max(1, ...history.map((p) => Math.max(p.admitted_records, p.refused_requests)));
  for (const [field, cls] of [["admitted_records", "admitted"], ["refused_requests", "refused"]]) {
    if (history.length === 0) break;
    const step = history.length > 1 ? w / (history.length - 1) : w;
    const points = history.map((p, i) => `${(i * step).toFixed(1)},${(h - 2 - (p[field] / max) * (h - 4)).toFixed(1)}`);
    if (points.length === 1) points.push(`${w},${points[0].split(",")[1]}`);
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("class", cls);
    line.setAttribute("points", points.join(" "));
    svg.append(line);
  }
  return svg;
}

function dl(target, rows) {
  target.replaceChildren();
  for (const [k, v] of rows) target.append(el("dt", {}, k), el("dd", {}, v));
}

function render(s) {
  last = s;
  $("updated").textContent = "updated " + new Date().toLocaleTimeString() +
    (s.window_secs > 0 ? ` · rates over ${fmt(s.window_secs, 0)} s` : " · rates appear after a second");

  const b = s.buffer;
  const fill = Math.max(b.held_bytes / b.max_bytes, b.held_records / b.max_records);
  const g = $("buffer-gauge");
  g.replaceWith(Object.assign(gauge(fill, b.ready_high_water), { id: "buffer-gauge" }));
  $("buffer-gauge").dataset.fill = fill.toFixed(4);
  $("buffer-text").textContent = `${bytes(b.held_bytes)} of ${bytes(b.max_bytes)}, ${fmt(b.held_records, 0)} of ${fmt(b.max_records, 0)} records · not ready above ${fmt(b.ready_high_water * 100, 0)}%`;

  const global = $("global");
  global.replaceChildren();
  const globalQuotas = s.global_quotas || [];
  if (!s.global_records && !s.global_bytes && !globalQuotas.length) global.append(el("span", { class: "muted" }, "unlimited"));
  if (s.global_records) global.append(el("div", {}, "records"), bucketBar(s.global_records, "rec"));
  if (s.global_bytes) global.append(el("div", {}, "bytes"), bucketBar(s.global_bytes, "B"));
  if (globalQuotas.length) global.append(el("div", {}, "quotas"), Object.assign(quotaBars(globalQuotas), { id: "global-quotas" }));

  const k = s.kafka;
  const rows = [
    ["delivery p50", k.delivery_p50_ms === null ? "–" : "≤ " + fmt(k.delivery_p50_ms) + " ms"],
    ["delivery p99", k.delivery_p99_ms === null ? "–" : "≤ " + fmt(k.delivery_p99_ms) + " ms"],
    ["producer queue", fmt(k.queue_messages, 0) + " msgs, " + bytes(k.queue_bytes)],
  ];
  for (const br of k.brokers) rows.push([br.name, `rtt ${fmt(br.rtt_ms)} ms · throttle ${fmt(br.throttle_ms, 0)} ms`]);
  dl($("kafka"), rows);

  const c = s.cluster;
  dl($("cluster"), c
    ? [["replica", c.replica], ["members", fmt(c.members, 0)], ["mode", c.degraded ? "DEGRADED (local share)" : "shared"], ["lease calls/s", fmt(c.lease_calls_per_sec)]]
    : [["mode", "single instance"]]);

  // The adaptive limit: where it is and why (the controller's own sentence).
  const a = s.adaptive;
  dl($("adaptive"), !a || !a.settings.enabled
    ? [["limit", "off"]]
    : [
      ["limit", `${fmt(a.limit_ratio * 100, 0)}% of the ceiling` +
        (a.limit_records_per_sec > 0 ? ` · ${fmt(a.limit_records_per_sec, 0)} rec/s` : "")],
      ["phase", a.phase],
      ["why", a.reason],
      // The signal at its real resolution (1 %): the p90 the controller follows, over its
      // window, with the p50 and p99 of the same deliveries. A stalled broker delivers nothing
      // to measure: how long records have waited instead.
      ["delivery p90", !a.signal || a.signal.value_ms === null
        ? (a.stalled_ms > 0 ? `none delivered for ${fmt(a.stalled_ms, 0)} ms` : "–")
        : `${fmt(a.signal.value_ms, 1)} ms (p50 ${fmt(a.signal.p50_ms, 1)}, p99 ${fmt(a.signal.p99_ms, 1)}) · ` +
          `${fmt(a.signal.deliveries, 0)} deliveries in ${fmt(a.signal.window_ms, 0)} ms`],
      // What it is judged against: the path's own baseline and noise, or the operator's target.
      ["judged against", !a.signal || a.signal.target_ms === null ? "– (nothing measured yet)"
        : (a.signal.target_from === "configured"
          ? `the configured target: slow above ${fmt(a.signal.target_ms, 1)} ms`
          : `baseline ${fmt(a.signal.baseline_ms, 1)} ms ± ${fmt(a.signal.noise_ms, 1)} ms noise · ` +
            `slow above ${fmt(a.signal.target_ms, 1)} ms`) +
          ` · healthy below ${fmt(a.signal.healthy_below_ms, 1)} ms`],
      // librdkafka's own windows (every statistics interval): where the time went.
      ...(a.librdkafka || []).map((b) => [b.broker,
        `rtt p50 ${fmt(b.rtt_p50_ms, 1)} / p99 ${fmt(b.rtt_p99_ms, 1)} ms · ` +
        `in queue p99 ${fmt(b.int_latency_p99_ms, 1)} ms · request buffer p99 ${fmt(b.outbuf_latency_p99_ms, 1)} ms`]),
      // What Kafka last carried at healthy latency: healthy signals bring the limit back there.
      ["recovers to", a.recovery_level_ratio === null ? "–"
        : (a.recovery_level_records_per_sec === null ? "" : `${fmt(a.recovery_level_records_per_sec, 0)} rec/s, `) +
          `${fmt(a.recovery_level_ratio * 100, 2)}% of the ceiling` +
          (a.recovery_level_learned === false ? " (nothing carried at healthy latency yet)" : "") +
          (a.time_to_recovery_level_s > 0 ? ` · in ${fmt(a.time_to_recovery_level_s)} s of healthy signals` : " · there")],
    ]);

  // Consumers against producers, judged by recovery time (null: the lag is not shrinking).
  const guards = s.lag_guards || [];
  dl($("lag-guards"), guards.length === 0
    ? [["guards", "none"]]
    : guards.map((g) => [
      g.guard.name,
      g.last_error
        ? `${g.phase} · offsets unreadable: ${g.last_error}` +
          (g.cap_records_per_sec === null ? " · no cap" : ` · last cap ${fmt(g.cap_records_per_sec)}/s kept`)
        : `${g.phase} · lag ${fmt(g.lag_records, 0)} · consumers ${fmt(g.consumer_rate)}/s vs producers ${fmt(g.producer_rate)}/s` +
          ` · recovery ${g.recovery_s === null ? "∞" : fmt(g.recovery_s) + " s"} (max ${fmt(g.guard.max_recovery_s)} s)` +
          (g.cap_records_per_sec === null ? "" : ` · cap ${fmt(g.cap_records_per_sec)}/s`) +
          (g.reason ? ` · ${g.reason}` : ""),
    ]));

  renderTenants();
}

// What the server is asked for: the table's order (admitted and refused are the server's own
// orders; the others re-sort what it sent) and the filter box as an id prefix.
function statusQuery() {
  const sort = sortKey === "admitted" ? "admitted" : sortKey === "id" ? "id" : "refused";
  const q = $("filter").value.trim();
  return `?limit=50&sort=${sort}` + (q ? "&q=" + encodeURIComponent(q) : "");
}

function renderTenants() {
  if (!last) return;
  const filter = $("filter").value.trim();
  $("tenant-count").textContent = `${fmt(last.tenants.length, 0)} of ${fmt(last.tenant_count, 0)} tenants` +
    (filter ? ` (ids starting with “${filter}”)` : "");
  const key = {
    id: (t) => t.id,
    admitted: (t) => t.admitted_records_per_sec,
    refused: (t) => t.refused_requests_per_sec,
    buffer: (t) => t.buffer_bytes,
  }[sortKey];
  const tenants = last.tenants
    .filter((t) => !filter || t.id.startsWith(filter))
    .sort((a, b) => {
      const x = key(a), y = key(b);
      const order = x < y ? -1 : x > y ? 1 : a.id < b.id ? -1 : 1;
      return sortDesc ? -order : order;
    });
  const body = $("tenants").tBodies[0];
  body.replaceChildren();
  for (const t of tenants) {
    const reasons = el("td", {});
    for (const [r, n] of Object.entries(t.refused_by_reason)) reasons.append(el("span", { class: "reason", title: fmt(n) + "/s" }, r));
    for (const [r, n] of Object.entries(t.shadowed_by_reason || {})) reasons.append(el("span", { class: "reason shadow", title: fmt(n, 0) + " would have been refused (shadow mode)" }, r + " (shadow)"));
    const row = el("tr", { "data-tenant": t.id },
      el("td", {}, t.id),
      el("td", { class: "num" }, fmt(t.admitted_records_per_sec)),
      el("td", { class: "num refused" }, fmt(t.refused_requests_per_sec)),
      reasons,
      el("td", {}, sparkline(t.history)),
      el("td", {}, bucketBar(t.records_bucket, "rec")),
      el("td", {}, bucketBar(t.bytes_bucket, "B")),
      el("td", {}, quotaBars(t.quotas || [])),
      el("td", { class: "num", title: "may hold " + fmt(t.buffer_share * 100, 0) + "% of the buffer" }, bytes(t.buffer_bytes)));
    if (t.refused_requests_per_sec > 0) row.classList.add("refused");
    body.append(row);
  }
  for (const th of document.querySelectorAll("th[data-sort]")) {
    th.classList.toggle("sorted", th.dataset.sort === sortKey);
    th.classList.toggle("asc", th.dataset.sort === sortKey && !sortDesc);
  }
}

function showLogin(message) {
  clearTimeout(timer);
  $("status").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
  $("token").focus();
}

async function poll() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) return showLogin();
  try {
    const response = await fetch("/admin/status" + statusQuery(), { headers: { Authorization: "Bearer " + token }, cache: "no-store" });
    if (response.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      return showLogin("That token was not accepted.");
    }
    if (!response.ok) throw new Error("status " + response.status);
    $("login").hidden = true;
    $("status").hidden = false;
    $("logout").hidden = false;
    render(await response.json());
  } catch (e) {
    $("updated").textContent = "not updated: " + e.message;
  }
  timer = setTimeout(poll, 1000);
}

$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
  $("token").value = "";
  poll();
});
$("logout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  showLogin();
});
// A new filter or order asks the server again at once (rows already shown are narrowed now).
function refresh() {
  renderTenants();
  clearTimeout(timer);
  if (sessionStorage.getItem(TOKEN_KEY)) timer = setTimeout(poll, 150);
}
$("filter").addEventListener("input", refresh);
for (const th of document.querySelectorAll("th[data-sort]")) {
  th.addEventListener("click", () => {
    if (sortKey === th.dataset.sort) sortDesc = !sortDesc;
    else { sortKey = th.dataset.sort; sortDesc = sortKey !== "id"; }
    refresh();
  });
}
poll();
