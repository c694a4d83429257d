// The flashgate dashboard: polls GET /v1/status once a second and draws the
// figures and their ten-minute history with our own small canvas plotter.
// The key (dashboard or admin) lives in sessionStorage for this tab only.
"use strict";

(function () {
  const KEY_STORE = "flashgate.dashboard.key";
  const POLL_MS = 1000;
  const COLORS = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563"];
  const $ = (id) => document.getElementById(id);

  let timer = null;

  // ---- formatting ----
  function fmtInt(v) { return Number(v || 0).toLocaleString("en-US"); }
  // Speculative drafts accepted of those verified, and the acceptance rate.
  function fmtDrafts(acc, all) {
    acc = Number(acc || 0); all = Number(all || 0);
    return fmtInt(acc) + " / " + fmtInt(all) + (all ? " (" + Math.round(100 * acc / all) + " %)" : "");
  }
  function fmtBytes(v) {
    v = Number(v || 0);
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i ? v.toFixed(1) : String(Math.round(v))) + " " + units[i];
  }
  function fmtNum(v) {
    v = Number(v || 0);
    if (v === 0) return "0";
    if (Math.abs(v) >= 100) return v.toFixed(0);
    if (Math.abs(v) >= 1) return v.toFixed(1);
    return v.toPrecision(2);
  }
  function setText(id, text) { const el = $(id); if (el && el.textContent !== text) el.textContent = text; }

  // ---- plotting ----
  // series: [{label, color, values}], t: unix seconds per sample; fmt formats axis values.
  function plot(canvasId, legendId, t, series, fmt) {
    const canvas = $(canvasId);
    const ratio = window.devicePixelRatio || 1;
    const w = canvas.clientWidth, h = canvas.clientHeight;
    if (!w || !h) return;
    if (canvas.width !== Math.round(w * ratio) || canvas.height !== Math.round(h * ratio)) {
      canvas.width = Math.round(w * ratio);
      canvas.height = Math.round(h * ratio);
    }
    const g = canvas.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, w, h);
    const left = 70, right = 10, top = 8, bottom = 20;
    const pw = w - left - right, ph = h - top - bottom;
    let max = 0;
    for (const s of series) for (const v of s.values) if (v > max) max = v;
    max = niceMax(max);
    const now = t.length ? t[t.length - 1] : Date.now() / 1000;
    // the span shown grows with the history the server holds: 1 to 10 minutes
    const span = Math.min(600, Math.max(60, t.length ? now - t[0] : 0));
    const x = (ts) => left + pw * (1 - (now - ts) / span);
    const y = (v) => top + ph * (1 - v / max);

    g.font = "11px system-ui, sans-serif";
    g.fillStyle = "#6b7280";
    g.strokeStyle = "#e3e6eb";
    g.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
      const v = (max * i) / 4, yy = Math.round(y(v)) + 0.5;
      g.beginPath(); g.moveTo(left, yy); g.lineTo(w - right, yy); g.stroke();
      g.textAlign = "right"; g.textBaseline = "middle";
      g.fillText(fmt(v), left - 6, yy);
    }
    g.textAlign = "center"; g.textBaseline = "top";
    const step = [15, 30, 60, 120, 180].find((st) => span / st <= 5) || 180; // seconds between time labels
    for (let ago = Math.floor(span / step) * step; ago >= 0; ago -= step) {
      const label = ago === 0 ? "now" : ago < 60 || ago % 60 ? "-" + ago + "s" : "-" + ago / 60 + "m";
      g.fillText(label, Math.min(Math.max(x(now - ago), left + 10), w - right - 12), h - bottom + 5);
    }
    for (const s of series) {
      g.strokeStyle = s.color;
      g.lineWidth = 1.6;
      g.beginPath();
      let started = false;
      for (let i = 0; i < s.values.length && i < t.length; i++) {
        if (now - t[i] > span) continue;
        const px = x(t[i]), py = y(s.values[i]);
        if (!started) { g.moveTo(px, py); started = true; } else g.lineTo(px, py);
      }
      g.stroke();
    }
    const legend = $(legendId);
    const html = series.map((s) => {
      const last = s.values.length ? s.values[s.values.length - 1] : 0;
      return '<span><i style="background:' + s.color + '"></i>' + escapeHtml(s.label) + ": " + escapeHtml(fmt(last)) + "</span>";
    }).join("");
    if (legend.innerHTML !== html) legend.innerHTML = html;
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 4, 6, 8, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  function escapeHtml(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }

  // ---- rendering the status document ----
  function render(doc) {
    const n = doc.now, kv = doc.kv, r = doc.redis, s = doc.series || {};
    setText("tokens-per-s", fmtNum(n.tokens_per_s));
    setText("generated-tokens", fmtInt(n.generated_tokens));
    setText("connections", fmtInt(n.connections));
    setText("sessions-streaming", fmtInt(n.sessions_streaming));
    setText("sessions-idle", fmtInt(n.sessions_idle_resident));
    setText("sessions-disk", fmtInt(n.sessions_on_disk));
    setText("queue-depth", fmtInt(n.queue_depth));
    setText("responses-finished", fmtInt(n.responses_finished));
    setText("quota-rejections", fmtInt(n.quota_rejections));
    setText("engine-steps", fmtInt(n.engine_steps));
    setText("prefix-hits", kv.prefix_lookups ? ((100 * kv.prefix_hits) / kv.prefix_lookups).toFixed(0) + " %" : "–");
    setText("redis-state", !r.enabled ? "off" : r.up ? "up " + Number(r.last_round_trip_ms || 0).toFixed(2) + " ms" : "DOWN");
    $("redis-state").className = "value" + (r.enabled && !r.up ? " bad" : "");

    const t = s.t || [];
    plot("plot-tokens", "legend-tokens", t, [{ label: "tokens/s", color: COLORS[0], values: s.tokens_per_s || [] }], fmtNum);
    const tenants = Object.keys(s.tenant_sessions || {});
    plot("plot-tenants", "legend-tenants", t,
      tenants.map((id, i) => ({ label: id, color: COLORS[i % COLORS.length], values: s.tenant_sessions[id] })), fmtNum);
    plot("plot-ttft", "legend-ttft", t, [
      { label: "p50", color: COLORS[0], values: s.ttft_p50_s || [] },
      { label: "p95", color: COLORS[1], values: s.ttft_p95_s || [] }], fmtNum);
    plot("plot-itl", "legend-itl", t, [
      { label: "p50", color: COLORS[0], values: s.itl_p50_s || [] },
      { label: "p95", color: COLORS[1], values: s.itl_p95_s || [] }], fmtNum);
    plot("plot-kv", "legend-kv", t, [
      { label: "resident", color: COLORS[2], values: s.kv_resident_bytes || [] },
      { label: "disk", color: COLORS[3], values: s.kv_disk_bytes || [] }], fmtBytes);
    plot("plot-queue", "legend-queue", t, [
      { label: "queue depth", color: COLORS[4], values: s.queue_depth || [] },
      { label: "quota rejections/s", color: COLORS[1], values: s.quota_rejections || [] }], fmtNum);

    const rows = doc.tenants.map((x) => "<tr><td>" + escapeHtml(x.id) + "</td><td>" + fmtInt(x.sessions) + "</td><td>" +
      fmtInt(x.streaming) + "</td><td>" + fmtInt(x.output_tokens) + "</td><td>" + fmtDrafts(x.draft_accepted, x.draft_tokens) +
      "</td><td>" + fmtInt(x.cached_input_tokens) + " / " +
      fmtInt(x.input_tokens) + "</td><td>" + fmtBytes(x.kv_resident_bytes) + "</td><td>" + fmtInt(x.quota_rejections) +
      "</td><td>" + (x.fail_mode === "closed" ? "refuse" : "admit (backstop)") + "</td></tr>").join("");
    const body = document.querySelector("#tenants tbody");
    if (body.innerHTML !== rows) body.innerHTML = rows;
    renderCluster(doc.cluster);
    setText("last-update", "updated " + new Date(doc.time * 1000).toLocaleTimeString() + " · up " + Math.round(doc.uptime_s) + " s" +
      (doc.draining ? " · draining" : ""));
  }

  // Every instance the session directory knows (from this instance's last read of Redis).
  function renderCluster(c) {
    $("cluster").hidden = !c || !c.enabled;
    if (!c || !c.enabled) return;
    setText("cluster-summary", fmtInt(c.instance_count) + " instances · " + fmtInt(c.sessions) + " sessions · " +
      fmtInt(c.streaming) + " streaming · " + fmtNum(c.tokens_per_s) + " tokens/s" +
      (c.view_age_ms === null ? " · not read yet" : c.view_age_ms > 2500 ? " · read " + (c.view_age_ms / 1000).toFixed(0) +
        " s ago (Redis unreachable?)" : ""));
    const rows = c.instances.map((x) => {
      const stale = x.age_ms > 2500; // more than two publish periods (1 s) missed
      const st = x.draining ? "draining" : stale ? "silent " + (x.age_ms / 1000).toFixed(0) + " s" : "live";
      return "<tr" + (x.self ? ' class="self"' : "") + "><td>" + escapeHtml(x.instance_id) + (x.self ? " (this)" : "") +
        "</td><td>" + escapeHtml(x.url) + "</td><td>" + fmtInt(x.sessions) + "</td><td>" + fmtInt(x.leases) + "</td><td>" +
        fmtInt(x.streaming) + "</td><td>" + fmtBytes(x.kv_used_bytes) + " / " + fmtBytes(x.kv_capacity_bytes) + "</td><td>" +
        fmtNum(x.tokens_per_s) + "</td><td>" + (x.age_ms / 1000).toFixed(1) + " s ago</td><td" +
        (stale || x.draining ? ' class="bad"' : "") + ">" + st + "</td></tr>";
    }).join("");
    const body = document.querySelector("#instances tbody");
    if (body.innerHTML !== rows) body.innerHTML = rows;
  }

  // ---- state ----
  function state(kind, text) {
    const pill = $("conn-state");
    pill.textContent = text;
    pill.className = "pill " + (kind === "ok" ? "pill-ok" : kind === "bad" ? "pill-bad" : "pill-wait");
  }
  function banner(text) {
    const b = $("banner");
    b.hidden = !text;
    if (text) b.textContent = text;
  }
  function askKey(message) {
    $("main").hidden = true;
    $("key-form").hidden = false;
    $("forget-key").hidden = true;
    state("wait", "key needed");
    banner(message);
    $("key-input").focus();
  }

  async function poll() {
    const key = sessionStorage.getItem(KEY_STORE) || "";
    const headers = key ? { Authorization: "Bearer " + key } : {};
    let res;
    try {
      res = await fetch("/v1/status", { headers: headers, cache: "no-store" });
    } catch (e) {
      state("bad", "unreachable");
      banner("The flashgate server is unreachable (" + location.host + "): showing the last figures received; retrying every second.");
      return schedule();
    }
    if (res.status === 401) {
      sessionStorage.removeItem(KEY_STORE);
      askKey(key ? "That key was refused: enter the dashboard key or the admin key." : "");
      return; // polling resumes when a key is entered
    }
    if (!res.ok) {
      state("bad", "error " + res.status);
      banner("The server answered " + res.status + " to /v1/status; retrying every second.");
      return schedule();
    }
    let doc;
    try {
      doc = await res.json();
    } catch (e) {
      state("bad", "bad reply");
      banner("The server's status reply could not be read; retrying.");
      return schedule();
    }
    $("key-form").hidden = true;
    $("main").hidden = false;
    $("forget-key").hidden = !key;
    state("ok", "live");
    banner("");
    render(doc);
    schedule();
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(poll, POLL_MS);
  }

  $("key-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const key = $("key-input").value.trim();
    if (!key) return;
    sessionStorage.setItem(KEY_STORE, key);
    $("key-input").value = "";
    banner("");
    state("wait", "connecting…");
    poll();
  });
  $("forget-key").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_STORE);
    clearTimeout(timer);
    askKey("");
  });
  window.addEventListener("resize", () => { clearTimeout(timer); poll(); });

  // The server answers this page 401 when it wants a key and none came with the request
  // (a browser's navigation never carries one): then ask for it before fetching anything,
  // unless this tab already holds one.
  const nav = performance.getEntriesByType("navigation")[0];
  if (nav && nav.responseStatus === 401 && !sessionStorage.getItem(KEY_STORE)) askKey("");
  else poll();
})();
