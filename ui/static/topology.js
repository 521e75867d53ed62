/* The topology page: latency constraints, DAG with live edge rates, placement with drag-and-drop
   live moves (chained executors marked), the timeline of migrations and OTD rounds, components,
   traffic heatmap, state and metrics.
   Polls /api/v1/topology/:id every 2 s; rebuilds the placement only when the plan changes and
   otherwise recolours it in place, so that 1,000 executors stay cheap to update. */
"use strict";
(() => {
  const { api, post, el, num, rate, ms, clock, ago, loadColour, toast, confirmDialog, liveDialog, logRenderer } = NS;
  const NAME = decodeURIComponent(location.pathname.split("/").filter(Boolean)[1] || "");
  const BASE = "/api/v1/topology/" + encodeURIComponent(NAME);
  const SVGNS = "http://www.w3.org/2000/svg";
  const state = {
    name: NAME, doc: null, sups: null, dagTraffic: null, traffic: null, trafficWindow: 60,
    structure: "", chips: new Map(), kinds: new Map(), selected: null, renders: 0, lastRenderMs: 0,
    firstRenderAt: null, timelineKey: "", configKey: "", latencyKey: "", missing: false,
  };
  window.nstorm = state; // read by the browser tests and benchmarks.ui

  document.getElementById("title").textContent = NAME;
  document.title = "nstorm: " + NAME;

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) node.setAttribute(k, v);
    for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return node;
  }
  const componentOf = (eid) => eid.slice(0, eid.lastIndexOf(":"));
  const indexOf = (eid) => Number(eid.slice(eid.lastIndexOf(":") + 1));
  const byExecutor = (a, b) => componentOf(a) === componentOf(b) ? indexOf(a) - indexOf(b) : componentOf(a) < componentOf(b) ? -1 : 1;

  // -- header, summary, alerts -------------------------------------------------------------------
  function renderHeader(doc) {
    const s = document.getElementById("status");
    s.replaceChildren(el("span", { class: "badge " + doc.status, "data-testid": "status" }, doc.status));
    document.getElementById("activate").disabled = doc.status === "ACTIVE";
    document.getElementById("deactivate").disabled = doc.status !== "ACTIVE";
  }

  function card(k, v, testid) {
    return el("div", { class: "card", "data-testid": testid }, el("div", { class: "v" }, v), el("div", { class: "k" }, k));
  }

  function renderSummary(doc) {
    const stats = doc.topologyStats[0];
    const t = doc.spoutTuples;
    document.getElementById("summary").replaceChildren(
      card("uptime", doc.uptime || "–"), card("plan version", "v" + doc.planVersion, "plan-version"),
      card("workers", num(doc.workersTotal)), card("executors", num(doc.executorsTotal), "executors-total"),
      card("emitted", num(stats.emitted)), card("acked", num(stats.acked)), card("failed", num(stats.failed)),
      card("pending", num(t.pending)), card("replayed", num(t.replayed)),
      card("complete latency", stats.completeLatency + " ms"), card("scheduler", doc.scheduler),
      card("migrations", num(doc.migrationsTotal)));
    const alerts = [];
    if (doc.stalled) {
      alerts.push(el("section", { class: "panel err", "data-testid": "stalled" },
        el("b", {}, "STALLED: "), `no ack since ${clock(doc.stalled.since)} with ${num(doc.stalled.pending)} tuples pending; `,
        `holding input: ${(doc.stalled.holding_input || []).join(", ") || "–"}; waiting for a state: ${(doc.stalled.waiting_for_state || []).join(", ") || "–"}`,
        (doc.stalled.holding_windows || []).length
          ? `; holding tuples in open windows: ${doc.stalled.holding_windows.join(", ")} (topology.max.spout.pending must cover what the windows hold)`
          : ""));
    }
    if (doc.otd && doc.otd.warning) alerts.push(el("section", { class: "panel" }, el("b", {}, "OTD warning: "), doc.otd.warning));
    document.getElementById("alerts").replaceChildren(...alerts);
  }

  // -- latency constraints ------------------------------------------------------------------------
  const PARTS = { buffer: "buffer wait", queue: "queue wait", processing: "processing" };

  /* [channel or component, part, ms] of the largest part of the last window (as the controller's
     PathWindow.dominant names it), or null before the first judged window. */
  function dominantPart(c) {
    let best = null;
    for (const [part, values] of Object.entries(c.parts_ms || {})) {
      for (const [where, v] of Object.entries(values || {})) {
        if (best === null || Number(v) > best[2]) best = [where, PARTS[part] || part, Number(v)];
      }
    }
    return best;
  }

  /* Shown only for a topology with constraints; rebuilt only when a constraint's record changes. */
  function renderLatency(doc) {
    const constraints = doc.constraints || [];
    const panel = document.getElementById("latency");
    panel.hidden = constraints.length === 0;
    const key = JSON.stringify(constraints);
    if (key === state.latencyKey) return;
    state.latencyKey = key;
    const rows = constraints.map((c) => {
      const path = c.path.join(">");
      const judged = c.met !== null && c.met !== undefined;
      const met = judged ? el("span", { class: c.met ? "met" : "broken" }, c.met ? "yes" : "no")
        : el("span", { class: "muted" }, c.samples !== undefined ? "no sample lately" : "not judged yet");
      const top = dominantPart(c);
      const why = [];
      if (c.warning) why.push(el("div", { class: "err", "data-testid": "warning" }, c.warning));
      if (top) why.push(el("div", { "data-testid": "dominant" }, `${top[0]}: ${top[1]} ${ms(top[2])}`));
      const actions = (c.actions || []).slice(-3).reverse().map((a) => el("li", { "data-kind": a.kind },
        el("span", { class: "t" }, clock(a.at)), el("span", { class: "kind" }, a.kind), a.detail));
      return el("tr", { "data-path": path, "data-met": String(judged ? c.met : "") },
        el("td", {}, path),
        el("td", { class: "num", title: `p99 over windows of ${c.window_secs} s` }, ms(c.p99_ms)),
        el("td", { class: "num", title: c.samples === undefined ? null : `${num(c.samples)} samples` }, ms(c.measured_p99_ms)),
        el("td", { "data-testid": "met" }, met, ` (${num(c.windows_met)} / ${num(c.windows)})`),
        el("td", { class: "wrap" }, why.length ? why : el("span", { class: "muted" }, "–")),
        el("td", { class: "wrap" }, actions.length ? el("ol", { class: "acts" }, actions) : el("span", { class: "muted" }, "none yet")));
    });
    panel.querySelector("tbody").replaceChildren(...rows);
  }

  // -- DAG ----------------------------------------------------------------------------------------
  function componentRates() {
    const t = state.dagTraffic;
    const rates = new Map();
    if (!t || !t.edges) return rates;
    for (const e of t.edges) {
      const key = componentOf(e.src) + ">" + componentOf(e.dst);
      rates.set(key, (rates.get(key) || 0) + e.tuples / t.window_secs);
    }
    return rates;
  }

  function renderDag(doc) {
    const nodes = doc.dag.nodes, edges = doc.dag.edges;
    const level = new Map(nodes.map((n) => [n.id, 0]));
    for (let pass = 0; pass < nodes.length; pass++) {
      let changed = false;
      for (const e of edges) {
        if (level.get(e.to) < level.get(e.from) + 1) { level.set(e.to, level.get(e.from) + 1); changed = true; }
      }
      if (!changed) break;
    }
    const columns = [];
    for (const n of nodes) (columns[level.get(n.id)] ||= []).push(n);
    const W = 160, H = 54, GX = 130, GY = 26, PAD = 10;
    const pos = new Map();
    const height = Math.max(...columns.map((c) => c.length)) * (H + GY);
    columns.forEach((col, i) => {
      col.sort((a, b) => (a.id < b.id ? -1 : 1));
      const top = (height - col.length * (H + GY)) / 2;
      col.forEach((n, j) => pos.set(n.id, { x: PAD + i * (W + GX), y: PAD + top + j * (H + GY) }));
    });
    const width = PAD * 2 + columns.length * (W + GX) - GX;
    const rows = new Map([...doc.spouts.map((s) => [s.spoutId, s]), ...doc.bolts.map((b) => [b.boltId, b])]);
    const rates = componentRates();
    const out = svg("svg", { width, height: height + PAD, viewBox: `0 0 ${width} ${height + PAD}`, role: "img",
                             "aria-label": "the topology's components and streams" });
    out.append(svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
      svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#8a94a6" }))));
    const outgoing = new Map();
    for (const e of edges) outgoing.set(e.from, (outgoing.get(e.from) || 0) + 1);
    for (const e of edges) {
      const a = pos.get(e.from), b = pos.get(e.to);
      if (!a || !b) continue;
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
      let r = rates.get(e.from + ">" + e.to);
      if (r === undefined && outgoing.get(e.from) === 1 && rows.get(e.from)) r = rows.get(e.from).emittedRate;
      out.append(svg("g", { class: "edge", "data-edge": e.from + ">" + e.to },
        svg("path", { d: `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2 - 2} ${y2}`, "marker-end": "url(#arrow)" }),
        svg("text", { x: mx, y: (y1 + y2) / 2 - 6, "text-anchor": "middle", "font-weight": 600 }, rate(r)),
        svg("text", { x: mx, y: (y1 + y2) / 2 + 14, "text-anchor": "middle", fill: "#667085" },
          e.grouping + (e.stream !== "default" ? ` (${e.stream})` : ""))));
    }
    for (const n of nodes) {
      const p = pos.get(n.id), row = rows.get(n.id) || {};
      const cap = row.capacity !== undefined ? Number(row.capacity) : null;
      const fill = n.kind === "spout" ? "#3b82c4" : loadColour(cap) || "#64748b";
      const sub = n.kind === "spout" ? `×${n.parallelism} · ${rate(row.emittedRate)}`
        : `×${n.parallelism} · ${rate(row.executedRate)} · cap ${cap === null ? "–" : cap.toFixed(2)}`;
      out.append(svg("g", { class: "node", "data-component": n.id, transform: `translate(${p.x},${p.y})` },
        svg("title", {}, `${n.id} (${n.kind}) ${sub}`),
        svg("rect", { width: W, height: H, fill }),
        svg("text", { x: 10, y: 21, "font-weight": 700 }, n.id.length > 20 ? n.id.slice(0, 19) + "…" : n.id),
        svg("text", { x: 10, y: 40, class: "sub" }, sub)));
    }
    document.querySelector("#dag .svg").replaceChildren(out);
  }

  // -- placement ----------------------------------------------------------------------------------
  const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  const esc = (text) => String(text).replace(/[&<>"']/g, (c) => ESCAPES[c]);
  const cpuText = (w) => (w.cpu === null || w.cpu === undefined ? "" : `cpu ${(100 * w.cpu).toFixed(0)}%`) +
                         (w.core === null || w.core === undefined ? "" : ` · core ${w.core}`);

  function chipKind(eid, spouts) {
    if (eid.startsWith("__acker:")) return "acker";
    return spouts.has(componentOf(eid)) ? "spout" : "bolt";
  }

  function paintChip(chip, row, kind) {
    const [eid, , capacity, executedRate, emittedRate, queue, errors] = row;
    let colour = null;
    if (kind === "bolt") colour = loadColour(capacity);
    else if (kind === "spout") colour = "var(--spout)";
    const style = colour || "";
    if (chip.dataset.bg !== style) { chip.dataset.bg = style; chip.style.background = style; }
    const title = kind === "acker" ? `${eid} (acker: not moved)`
      : `${eid}: capacity ${capacity === null ? "–" : Number(capacity).toFixed(3)}, executed ${rate(executedRate)}, ` +
        `emitted ${rate(emittedRate)}, queue ${queue}${errors ? ", " + errors + " errors" : ""}` +
        (chip.dataset.chainedTo ? `; chained to ${chip.dataset.chainedTo} (runs in its thread)` : "");
    if (chip.title !== title) chip.title = title;
    chip.classList.toggle("err", errors > 0);
  }

  function renderPlacement(doc, sups) {
    const rows = doc.placement.executors;
    const moving = new Set(doc.placement.moving);
    const chains = doc.chains || {}; // downstream executor -> the upstream executor whose thread runs it
    const spouts = new Set(doc.spouts.map((s) => s.spoutId));
    const mine = new Set(doc.workers.map((w) => w.id));
    const nodes = new Map();
    for (const w of doc.workers) (nodes.get(w.supervisorId) || nodes.set(w.supervisorId, { workers: [], free: [] }).get(w.supervisorId)).workers.push(w);
    for (const s of (sups && sups.supervisors) || []) {
      for (const slot of s.slots) {
        if (slot.topology || mine.has(slot.id)) continue;
        (nodes.get(s.id) || nodes.set(s.id, { workers: [], free: [] }).get(s.id)).free.push(slot);
      }
    }
    const placedIn = new Map(rows.map((r) => [r[0], r[1]]));
    const key = JSON.stringify([doc.planVersion, [...placedIn], [...moving], Object.entries(chains).sort(), [...nodes].map(([n, v]) => [n, v.workers.map((w) => [w.id, w.pid, w.alive]), v.free.map((f) => f.id)])]);
    const container = document.querySelector("#placement .nodes");
    if (key !== state.structure) {
      state.structure = key;
      state.chips.clear();
      const byWorker = new Map();
      for (const r of rows) (byWorker.get(r[1]) || byWorker.set(r[1], []).get(r[1])).push(r[0]);
      // One HTML string for the whole view: with 1,000 executors this is several times faster
      // than creating the elements one by one.
      const html = [];
      for (const node of [...nodes.keys()].sort()) {
        const { workers, free } = nodes.get(node);
        html.push(`<div class="nodebox" data-node="${esc(node)}"><div class="title">${esc(node)}</div><div class="workers">`);
        for (const w of workers.sort((a, b) => (a.id < b.id ? -1 : 1))) {
          const chips = (byWorker.get(w.id) || []).sort(byExecutor).map((eid) => {
            const kind = chipKind(eid, spouts);
            state.kinds.set(eid, kind);
            const drag = kind !== "acker" && !moving.has(eid) ? ' draggable="true"' : "";
            const host = Object.hasOwn(chains, eid) ? ` data-chained-to="${esc(chains[eid])}"` : "";
            return `<span class="executor${kind === "acker" ? " acker" : ""}${moving.has(eid) ? " moving" : ""}${host ? " chained" : ""}" ` +
                   `data-executor="${esc(eid)}"${host}${drag}>${esc(eid)}</span>`;
          }).join("");
          html.push(`<div class="worker${w.alive ? "" : " dead"}" data-worker="${esc(w.id)}" data-pid="${esc(w.pid ?? "")}">` +
                    `<div class="wtitle"><b>${esc(w.id)}</b>pid ${esc(w.pid ?? "–")}<span class="cpu">${esc(cpuText(w))}</span>` +
                    `<a href="#" class="log" data-log="${esc(w.id)}">log</a></div><div class="chips">${chips}</div></div>`);
        }
        for (const slot of free) {
          html.push(`<div class="worker free" data-worker="${esc(slot.id)}" title="free slot: drop an executor here to start a worker">` +
                    `<div class="wtitle"><b>${esc(slot.id)}</b>free slot</div><div class="chips"></div></div>`);
        }
        html.push("</div></div>");
      }
      container.innerHTML = html.join("");
      for (const chip of container.querySelectorAll(".executor[data-executor]")) state.chips.set(chip.dataset.executor, chip);
    } else {
      for (const w of doc.workers) {
        const box = container.querySelector(`.worker[data-worker="${CSS.escape(w.id)}"] .cpu`);
        const text = cpuText(w);
        if (box && box.textContent !== text) box.textContent = text;
      }
    }
    for (const r of rows) {
      const chip = state.chips.get(r[0]);
      if (chip) paintChip(chip, r, state.kinds.get(r[0]));
    }
  }

  async function move(eid, to) {
    const from = state.doc && state.doc.placement.executors.find((r) => r[0] === eid);
    if (!from || from[1] === to) return;
    const chip = state.chips.get(eid);
    if (chip) chip.classList.add("moving");
    try {
      await post(BASE + "/move", { executor: eid, to });
      toast(`moving ${eid} live: ${from[1]} → ${to}`);
    } catch (e) {
      if (chip) chip.classList.remove("moving");
      toast(`cannot move ${eid}: ${e.message}`, true);
    }
    poller.now();
  }

  function wirePlacement() {
    const container = document.querySelector("#placement .nodes");
    container.addEventListener("dragstart", (ev) => {
      const chip = ev.target.closest && ev.target.closest('.executor[draggable="true"]');
      if (!chip) return;
      ev.dataTransfer.setData("text/plain", chip.dataset.executor);
      ev.dataTransfer.effectAllowed = "move";
    });
    container.addEventListener("dragover", (ev) => {
      const box = ev.target.closest && ev.target.closest(".worker");
      if (!box) return;
      ev.preventDefault();
      ev.dataTransfer.dropEffect = "move";
      box.classList.add("over");
    });
    container.addEventListener("dragleave", (ev) => {
      const box = ev.target.closest && ev.target.closest(".worker");
      if (box && !box.contains(ev.relatedTarget)) box.classList.remove("over");
    });
    container.addEventListener("drop", (ev) => {
      const box = ev.target.closest && ev.target.closest(".worker");
      if (!box) return;
      ev.preventDefault();
      box.classList.remove("over");
      const eid = ev.dataTransfer.getData("text/plain");
      if (eid) move(eid, box.dataset.worker);
    });
    container.addEventListener("click", (ev) => {
      const link = ev.target.closest && ev.target.closest("a.log");
      if (!link) return;
      ev.preventDefault();
      showLog(link.dataset.log);
    });
  }

  // -- timeline -----------------------------------------------------------------------------------
  function renderTimeline(migr, otd) {
    const events = [];
    for (const m of migr.migrations) events.push({ t: m.requested_at, kind: "migration", m });
    for (const r of otd.rounds) events.push({ t: r.at, kind: "otd", r });
    events.sort((a, b) => b.t - a.t);
    const shown = events.slice(0, 300);
    document.getElementById("timeline-hint").textContent =
      `${migr.migrations.length} moves, ${otd.rounds.length} OTD rounds kept` + (otd.scheduler === "otd" ? "" : " (scheduler: " + otd.scheduler + ")");
    const key = JSON.stringify(shown.map((e) => [e.t, e.kind, e.m ? e.m.completed_at : e.r.case]));
    // The strip is drawn in a fixed coordinate system stretched to the panel's width (reading the
    // width would force a layout of the whole page): events are vertical ticks, which stretch well.
    const strip = document.querySelector("#timeline svg");
    const width = 1000, now = Date.now() / 1000, span = 600;
    const ticks = events.filter((e) => e.t > now - span).map((e) => {
      const x = Math.max(2, Math.min(width - 2, (e.t - (now - span)) / span * width)).toFixed(1);
      const colour = e.kind === "otd" ? "#7a2ed6" : e.m.by === "ui" ? "#d97706" : "#2f6fdf";
      const [y1, y2, w] = e.kind === "otd" ? [6, 22, 2] : [24, 42, 3];
      const title = e.kind === "otd" ? `OTD case ${e.r.case} at ${clock(e.t)}` : `${e.m.executor} by ${e.m.by} at ${clock(e.t)}`;
      return `<line x1="${x}" x2="${x}" y1="${y1}" y2="${y2}" stroke="${colour}" stroke-width="${w}" ` +
             `vector-effect="non-scaling-stroke"><title>${esc(title)}</title></line>`;
    });
    strip.setAttribute("viewBox", `0 0 ${width} 46`);
    strip.setAttribute("preserveAspectRatio", "none");
    strip.innerHTML = `<line x1="0" x2="${width}" y1="23" y2="23" stroke="#d9dee7" vector-effect="non-scaling-stroke"></line>` + ticks.join("");
    if (key === state.timelineKey) return;
    state.timelineKey = key;
    const list = document.querySelector("#timeline ol");
    const items = shown.map((e) => {
      if (e.kind === "migration") {
        const m = e.m;
        const done = m.completed_at
          ? `done in ${(m.completed_at - m.requested_at).toFixed(2)} s` + (m.stall_secs !== null && m.stall_secs !== undefined ? `, stalled ${(1000 * m.stall_secs).toFixed(1)} ms` : "") +
            (m.state_lost ? ", state lost" : "")
          : "in progress";
        return `<li class="event migration" data-executor="${esc(m.executor)}" data-by="${esc(m.by)}" data-mode="${esc(m.mode)}" ` +
               `data-state="${m.completed_at ? "COMPLETED" : "REQUESTED"}" data-to="${esc(m.to)}"><span class="t">${clock(m.requested_at)}</span>` +
               `<span class="kind">move</span>${esc(`${m.executor}  ${m.from} → ${m.to} · ${m.mode} · by ${m.by} · ${done}`)}</li>`;
      }
      const r = e.r;
      const what = r.executor ? `moves ${r.executor} → ${r.target} (ASC ${r.asc === null || r.asc === undefined ? "–" : Number(r.asc).toFixed(1)})` : "no move";
      const text = `case ${r.case} (${r.engine || "?"}) ${what}` +
        (r.inter_node_ratio !== undefined && r.inter_node_ratio !== null ? ` · inter-node ${(100 * r.inter_node_ratio).toFixed(1)}%` : "") +
        (r.warning ? " · " + r.warning : "");
      return `<li class="event otd" data-case="${esc(r.case)}"><span class="t">${clock(r.at)}</span><span class="kind">OTD</span>${esc(text)}</li>`;
    });
    list.innerHTML = items.length ? items.join("")
      : `<li class="muted">No move yet: drag an executor in the placement view, or use 'nstorm rebalance'.</li>`;
  }

  // -- components ---------------------------------------------------------------------------------
  function errorCell(row, component) {
    if (!row.lastError) return el("td", { class: "muted" }, "–");
    return el("td", {}, el("a", { href: "#", class: "err", "data-error": component, onclick: (ev) => { ev.preventDefault(); showError(row); } },
      row.lastError.length > 60 ? row.lastError.slice(0, 59) + "…" : row.lastError),
      row.errorLapsedSecs !== null ? el("span", { class: "muted" }, ` ${row.errorLapsedSecs}s ago`) : null);
  }

  function select(component) {
    state.selected = state.selected === component ? null : component;
    renderComponents(state.doc);
    refreshComponent();
  }

  function renderComponents(doc) {
    const p99 = (lat) => (lat && lat.p99 !== undefined ? ms(lat.p99) : "–");
    document.querySelector("#spouts tbody").replaceChildren(...doc.spouts.map((s) => el("tr", {
      class: "clickable" + (state.selected === s.spoutId ? " selected" : ""), "data-component": s.spoutId, onclick: () => select(s.spoutId) },
      el("td", {}, s.spoutId), el("td", { class: "num" }, s.executors), el("td", { class: "num" }, num(s.emitted)),
      el("td", { class: "num" }, rate(s.emittedRate)), el("td", { class: "num" }, num(s.acked)), el("td", { class: "num" }, num(s.failed)),
      el("td", { class: "num" }, s.completeLatency + " ms"), errorCell(s, s.spoutId))));
    document.querySelector("#bolts tbody").replaceChildren(...doc.bolts.map((b) => el("tr", {
      class: "clickable" + (state.selected === b.boltId ? " selected" : ""), "data-component": b.boltId, onclick: () => select(b.boltId) },
      el("td", {}, b.boltId), el("td", { class: "num" }, b.executors), el("td", { class: "num" }, num(b.executed)),
      el("td", { class: "num" }, rate(b.executedRate)), el("td", { class: "num" }, num(b.emitted)), el("td", { class: "num" }, num(b.acked)),
      el("td", { class: "num" }, num(b.failed)),
      el("td", { class: "num", style: `color:${loadColour(Number(b.capacity)) || "inherit"};font-weight:600` }, b.capacity),
      el("td", { class: "num" }, b.executeLatency + " ms"), el("td", { class: "num" }, p99(b.latency)), errorCell(b, b.boltId))));
  }

  async function refreshComponent() {
    const box = document.getElementById("component");
    if (!state.selected) { box.replaceChildren(); return; }
    const c = await api(BASE + "/component/" + encodeURIComponent(state.selected));
    const spout = c.componentType === "spout";
    const head = ["executor", "worker", "host", "port", spout ? "emitted" : "executed", spout ? "emitted/s" : "executed/s",
                  "acked", "failed", "queue", spout ? "complete latency" : "capacity", spout ? "pending" : "execute latency", "last error"];
    const rows = c.executorStats.map((x) => el("tr", { "data-executor": x.id },
      el("td", {}, x.id), el("td", {}, x.worker), el("td", {}, x.host ?? "–"), el("td", { class: "num" }, x.port ?? "–"),
      el("td", { class: "num" }, num(spout ? x.emitted : x.executed)), el("td", { class: "num" }, rate(spout ? x.emittedRate : x.executedRate)),
      el("td", { class: "num" }, num(x.acked)), el("td", { class: "num" }, num(x.failed)), el("td", { class: "num" }, num(x.queue)),
      el("td", { class: "num" }, spout ? (x.completeLatency + " ms") : (x.capacity ?? "–")),
      el("td", { class: "num" }, spout ? num(x.pending) : x.executeLatency + " ms"),
      el("td", { class: x.lastError ? "err" : "muted" }, x.lastError || "–")));
    const extras = Object.entries(c.extra || {});
    box.replaceChildren(el("h3", {}, `${c.id} (${c.componentType}) — executors`),
      el("table", { "data-testid": "executors" }, el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))), el("tbody", {}, rows)),
      extras.length ? el("div", { class: "kv" }, extras.flatMap(([k, v]) => [el("div", { class: "k" }, k), el("div", {}, typeof v === "object" ? JSON.stringify(v) : String(v))])) : null,
      c.componentErrors.length ? el("div", {}, el("h4", {}, "Errors"), c.componentErrors.map((e) => el("details", {},
        el("summary", { class: "err" }, `${e.executor}: ${e.error} (${e.errorLapsedSecs ?? "?"}s ago)`), el("pre", { class: "trace" }, e.trace || e.error)))) : null);
  }

  function showError(row) {
    const dialog = el("dialog", { class: "wide", "data-testid": "error" },
      el("h3", {}, "Last error"), el("p", {}, `${row.errorWorker || ""} · ${row.errorLapsedSecs ?? "?"}s ago`),
      el("pre", { class: "trace" }, row.errorTrace || row.lastError),
      el("div", { class: "actions" }, row.errorWorker ? el("button", { onclick: () => { dialog.close(); showLog(row.errorWorker); } }, "Worker log") : null,
        el("button", { onclick: () => dialog.close() }, "Close")));
    dialog.addEventListener("close", () => dialog.remove());
    document.body.append(dialog);
    dialog.showModal();
  }

  function showLog(worker) {
    const pre = el("pre", { class: "log", "data-testid": "log" }, "loading…");
    const path = `${BASE}/worker/${encodeURIComponent(worker)}`;
    liveDialog(`Log of worker ${worker}`, pre, `${path}/log?lines=400`, logRenderer(pre), [
      el("a", { class: "button", "data-testid": "download", download: "", href: `${path}/log/download` }, "Download"),
      el("button", { "data-testid": "dump", onclick: () => showDump(worker) }, "Thread dump")]);
  }

  // Storm's log search: every worker's log, each searched by its node's supervisor.
  async function showSearch(q, max) {
    const body = el("div", { "data-testid": "search" }, "searching…");
    const dialog = el("dialog", { class: "wide" }, el("h3", {}, `Lines with “${q}” in the logs of ${NAME}`), body,
      el("div", { class: "actions" }, el("button", { onclick: () => dialog.close() }, "Close")));
    dialog.addEventListener("close", () => dialog.remove());
    document.body.append(dialog);
    dialog.showModal();
    try {
      const data = await api(`${BASE}/search?q=${encodeURIComponent(q)}&max=${max}`);
      const rows = data.matches.map((m) => el("tr", { "data-worker": m.worker },
        el("td", {}, el("a", { href: "#", onclick: (e) => { e.preventDefault(); showLog(m.worker); } }, m.worker)),
        el("td", {}, `${m.file}:${m.line}`), el("td", {}, el("code", {}, m.text))));
      const counts = Object.entries(data.found).map(([w, n]) => `${w}: ${n}`).join(", ") || "no worker searched";
      const errors = Object.entries(data.errors).map(([w, why]) => el("div", { class: "muted" }, `${w}: ${why}`));
      body.replaceChildren(el("p", {}, `lines found per worker: ${counts}`), ...errors,
        rows.length ? el("table", {}, el("tbody", {}, rows)) : el("p", {}, "no line matches"));
    } catch (e) { body.textContent = e.message; }
  }

  // Storm's topology event inspector: the tuples the sampled components emitted, every worker's.
  function showEvents() {
    const body = el("div", { "data-testid": "events" }, "loading…");
    liveDialog(`Tuples emitted in ${NAME} (sampled)`, body, `${BASE}/events?lines=200`, (data) => {
      const rows = data.events.map((e) => el("tr", { "data-executor": e.executor },
        el("td", {}, new Date(e.time * 1000).toISOString().slice(11, 23)), el("td", {}, e.executor), el("td", {}, e.stream),
        el("td", {}, el("code", {}, JSON.stringify(e.values))), el("td", { class: "muted" }, e.worker)));
      const errors = Object.entries(data.errors).map(([w, why]) => el("div", { class: "muted" }, `${w}: ${why}`));
      const off = Object.keys(data.sampling).length === 0;
      body.replaceChildren(...errors, rows.length ? el("table", {}, el("tbody", {}, rows.reverse()))
        : el("p", {}, off ? "Event sampling is off: turn it on with Debug…" : "No tuple logged yet."));
    });
  }

  // Storm UI's "JStack": the worker's supervisor asks it for a dump of its threads.
  async function showDump(worker) {
    const pre = el("pre", { class: "log", "data-testid": "threads" }, "asking the worker…");
    const dialog = el("dialog", { class: "wide" }, el("h3", {}, `Threads of worker ${worker}`), pre,
      el("div", { class: "actions" }, el("button", { onclick: () => dialog.close() }, "Close")));
    dialog.addEventListener("close", () => dialog.remove());
    document.body.append(dialog);
    dialog.showModal();
    try {
      const data = await post(`${BASE}/worker/${encodeURIComponent(worker)}/dump`);
      pre.textContent = data.lines.join("\n");
    } catch (e) { pre.textContent = e.message; }
  }

  // -- traffic heatmap ----------------------------------------------------------------------------
  function drawHeatmap() {
    const t = state.traffic, doc = state.doc;
    const canvas = document.querySelector("#traffic canvas");
    const tip = document.getElementById("traffic-tip");
    if (!t || !doc) return;
    const workerNode = new Map(doc.workers.map((w) => [w.id, w.supervisorId]));
    const order = doc.placement.executors.filter((r) => !r[0].startsWith("__acker:"))
      .map((r) => ({ id: r[0], worker: r[1], node: workerNode.get(r[1]) || r[1].split(":")[0] }))
      .sort((a, b) => (a.node !== b.node ? (a.node < b.node ? -1 : 1) : a.worker !== b.worker ? (a.worker < b.worker ? -1 : 1) : byExecutor(a.id, b.id)));
    const index = new Map(order.map((e, i) => [e.id, i]));
    const n = Math.max(1, order.length);
    const cell = Math.max(1, Math.min(24, Math.floor(600 / n)));
    const m = cell >= 10 ? 80 : 0; // room for the executors' names when the cells are big enough
    const size = m + cell * n;
    canvas.width = canvas.height = size;
    canvas.style.width = canvas.style.height = Math.min(Math.max(size, 240), 720) + "px";
    const ctx = canvas.getContext("2d");
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, size, size);
    if (m) {
      ctx.fillStyle = "#344054";
      ctx.font = `${Math.min(11, cell - 2)}px system-ui, sans-serif`;
      ctx.textBaseline = "middle";
      order.forEach((e, i) => {
        ctx.textAlign = "right";
        ctx.fillText(e.id, m - 4, m + i * cell + cell / 2);
        ctx.save();
        ctx.translate(m + i * cell + cell / 2, m - 4);
        ctx.rotate(-Math.PI / 2);
        ctx.textAlign = "left";
        ctx.fillText(e.id, 0, 0);
        ctx.restore();
      });
    }
    ctx.translate(m, m);
    let max = 0;
    for (const e of t.edges) max = Math.max(max, e.tuples);
    const logMax = Math.log10(max + 1) || 1;
    const cells = new Map();
    for (const e of t.edges) {
      const i = index.get(e.src), j = index.get(e.dst);
      if (i === undefined || j === undefined) continue;
      const v = Math.log10(e.tuples + 1) / logMax;
      ctx.fillStyle = `hsl(${(250 - 200 * v).toFixed(0)}, 75%, ${(70 - 35 * v).toFixed(0)}%)`;
      ctx.fillRect(j * cell, i * cell, cell, cell);
      cells.set(i * n + j, e);
    }
    ctx.strokeStyle = "#d93f3f";
    ctx.lineWidth = Math.max(1, Math.min(2, cell / 4));
    let start = 0;
    for (let k = 1; k <= order.length; k++) {
      if (k === order.length || order[k].node !== order[start].node) {
        ctx.strokeRect(start * cell, start * cell, (k - start) * cell, (k - start) * cell);
        start = k;
      }
    }
    state.heat = { order, cells, cell, n, m };
    tip.textContent = `${num(t.total_tuples)} tuples in ${t.window_secs} s · inter-node ratio ${(100 * t.inter_node_ratio).toFixed(1)}%`;
  }

  function wireHeatmap() {
    const canvas = document.querySelector("#traffic canvas");
    canvas.addEventListener("mousemove", (ev) => {
      const h = state.heat;
      if (!h) return;
      const r = canvas.getBoundingClientRect();
      const scale = canvas.width / r.width;
      const j = Math.floor(((ev.clientX - r.left) * scale - h.m) / h.cell);
      const i = Math.floor(((ev.clientY - r.top) * scale - h.m) / h.cell);
      if (i < 0 || j < 0 || i >= h.n || j >= h.n || !h.order[i] || !h.order[j]) return;
      const e = h.cells.get(i * h.n + j);
      document.getElementById("traffic-tip").textContent = `${h.order[i].id} (${h.order[i].worker}) → ${h.order[j].id} (${h.order[j].worker}): ` +
        (e ? `${num(e.tuples)} tuples, ${num(e.bytes)} bytes${e.inter_node ? ", inter-node" : ""}` : "nothing");
    });
    document.getElementById("traffic-window").addEventListener("change", (ev) => {
      state.trafficWindow = Number(ev.target.value);
      trafficPoller.now();
    });
  }

  // -- state, metrics, configuration ---------------------------------------------------------------
  function kv(entries) {
    return el("div", { class: "kv" }, entries.flatMap(([k, v]) => [el("div", { class: "k" }, k),
      el("div", {}, v === null || v === undefined ? "–" : typeof v === "object" ? JSON.stringify(v) : String(v))]));
  }

  function renderSections(doc) {
    const parts = [];
    for (const key of doc.sections) {
      const value = doc[key];
      if (key === "checkpoints" && value) {
        const last = value.last_committed;
        parts.push(el("div", { "data-section": key }, el("h3", {}, "Checkpoints"), kv([
          ["provider", value.provider], ["interval", value.interval_ms + " ms"],
          ["last committed", last ? `#${last.id} at ${clock(last.at)} (${ms(last.duration_ms)}, ${num(last.bytes)} bytes)` : "none yet"],
          ["restores", value.restores], ["last error", value.last_error],
          ...Object.entries(value).filter(([k]) => !["provider", "interval_ms", "last_committed", "restores", "last_error"].includes(k))])));
      } else if (key === "stalled") {
        parts.push(el("div", { "data-section": key }, el("h3", {}, "Stall watchdog"), value ? kv(Object.entries(value)) : el("p", { class: "muted" }, "not stalled")));
      } else {
        parts.push(el("div", { "data-section": key }, el("h3", {}, key),
          value && typeof value === "object" && !Array.isArray(value) ? kv(Object.entries(value)) : el("pre", {}, JSON.stringify(value, null, 2))));
      }
    }
    if (doc.otd) parts.push(el("div", { "data-section": "otd" }, el("h3", {}, "Last OTD round"), kv(Object.entries(doc.otd).filter(([k]) => k !== "loads" && k !== "classes"))));
    document.querySelector("#sections .body").replaceChildren(...(parts.length ? parts : [el("p", { class: "muted" }, "Nothing to show.")]));
  }

  function renderMetrics(doc) {
    const rows = [];
    for (const c of [...doc.spouts.map((s) => [s.spoutId, s]), ...doc.bolts.map((b) => [b.boltId, b])]) {
      const m = c[1].metrics;
      if (!m) continue;
      for (const [name, v] of Object.entries(m.counters || {})) rows.push(el("tr", { "data-metric": name }, el("td", {}, c[0]), el("td", {}, name), el("td", {}, "counter"), el("td", { class: "num" }, num(v))));
      for (const [name, per] of Object.entries(m.gauges || {})) {
        const values = Object.entries(per).map(([e, v]) => `${e}=${Number(v).toLocaleString()}`).join(", ");
        rows.push(el("tr", { "data-metric": name }, el("td", {}, c[0]), el("td", {}, name), el("td", {}, "gauge"), el("td", {}, values)));
      }
    }
    document.querySelector("#metrics .body").replaceChildren(rows.length
      ? el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "component"), el("th", {}, "name"), el("th", {}, "type"), el("th", {}, "value"))), el("tbody", {}, rows))
      : el("p", { class: "muted" }, "No user metrics: register some with context.register_counter(name) or context.register_gauge(name, fn)."));
  }

  function renderConfig(doc) {
    const key = JSON.stringify(doc.configuration);
    if (key === state.configKey) return;
    state.configKey = key;
    document.querySelector("#configuration .kv").replaceChildren(...Object.entries(doc.configuration).flatMap(([k, v]) =>
      [el("div", { class: "k" }, k), el("div", {}, v === null ? "null" : typeof v === "object" ? JSON.stringify(v) : String(v))]));
  }

  // -- actions ------------------------------------------------------------------------------------
  async function act(what, path, body) {
    try {
      await post(BASE + path, body);
      toast(`${NAME}: ${what} requested`);
    } catch (e) {
      toast(`${what} failed: ${e.message}`, true);
    }
    poller.now();
  }

  function wireActions() {
    document.getElementById("activate").addEventListener("click", async () => {
      if (await confirmDialog(`Activate ${NAME}?`, "Its spouts call next_tuple again.")) act("activate", "/activate");
    });
    document.getElementById("deactivate").addEventListener("click", async () => {
      if (await confirmDialog(`Deactivate ${NAME}?`, "Its spouts stop emitting; bolts finish what they have.")) act("deactivate", "/deactivate");
    });
    document.getElementById("rebalance").addEventListener("click", async () => {
      const v = await confirmDialog(`Rebalance ${NAME}?`, "Move executors between workers. To move one executor live, drag it in the placement view.", [
        { name: "random", label: "executors to move at random", value: "1", type: "number", size: 5 },
        { name: "mode", label: "mode", value: "thread", options: ["thread", "process", "stop"],
          help: "thread: live, only the moved executors pause; process: restart the workers concerned; stop: Storm's (deactivate, wait, restart all)" },
        { name: "wait", label: "wait before a stop-mode restart (s)", value: String(state.doc ? state.doc.msgTimeout : 30), type: "number", size: 5 }]);
      if (v) act("rebalance", `/rebalance/${encodeURIComponent(v.wait || 0)}`, { mode: v.mode, random: Number(v.random) || 0 });
    });
    document.getElementById("searchlogs").addEventListener("click", async () => {
      const v = await confirmDialog(`Search the logs of ${NAME}`, "Every worker's log (and its rotated files), each on its node: the last matching lines of each.", [
        { name: "q", label: "text", value: "", size: 30 },
        { name: "max", label: "lines at most per worker", value: "100", type: "number", size: 5 }]);
      if (v && v.q) showSearch(v.q, Number(v.max) || 100);
    });
    document.getElementById("debug").addEventListener("click", async () => {
      const doc = state.doc || { spouts: [], bolts: [], sampling: {} };
      const every = "every component";
      const comps = [...doc.spouts.map((s) => s.spoutId), ...doc.bolts.map((b) => b.boltId)];
      const now = Object.entries(doc.sampling || {}).map(([c, p]) => `${c === "*" ? every : c} ${p}%`);
      const v = await confirmDialog(`Debug ${NAME}`, "Log a sample of the tuples the components emit into their workers' events files, "
        + "live (Storm's event inspector); Events shows them. " + (now.length ? "Sampled now: " + now.join(", ") + "." : "Nothing is sampled now."), [
        { name: "component", label: "component", value: every, options: [every, ...comps] },
        { name: "action", label: "action", value: "enable", options: ["enable", "disable"], help: `disable for ${every}: every component's` },
        { name: "pct", label: "percentage of the tuples", value: "10", type: "number", size: 5 }]);
      if (!v) return;
      const where = v.component === every ? "" : `/component/${encodeURIComponent(v.component)}`;
      act("debug", `${where}/debug/${v.action}/${encodeURIComponent(v.pct || 0)}`);
    });
    document.getElementById("events").addEventListener("click", showEvents);
    document.getElementById("loglevels").addEventListener("click", async () => {
      let set = {};
      try { set = (await api(BASE + "/logconfig")).namedLoggerLevels; } catch (e) { toast(`log levels: ${e.message}`, true); return; }
      const now = Object.entries(set).map(([n, s]) => `${n}=${s.target_level}` + (s.timeout ? ` (${s.timeout}s left)` : " (until reset)"));
      const v = await confirmDialog(`Log levels of ${NAME}`, "Set a logger of the running workers to a level, live (Storm's Change Log Level). "
        + (now.length ? "Set now: " + now.join(", ") + "." : "None set now."), [
        { name: "logger", label: "logger (ROOT: the root logger)", value: "ROOT", size: 24 },
        { name: "level", label: "level", value: "DEBUG", options: ["DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF", "TRACE", "ALL", "reset"],
          help: "reset: the level it had before" },
        { name: "timeout", label: "for seconds (0: until reset)", value: "30", type: "number", size: 5 }]);
      if (!v || !v.logger) return;
      const entry = v.level === "reset" ? { target_level: null } : { target_level: v.level, timeout: Number(v.timeout) || 0 };
      act("log levels", "/logconfig", { namedLoggerLevels: { [v.logger]: entry } });
    });
    document.getElementById("kill").addEventListener("click", async () => {
      const v = await confirmDialog(`Kill ${NAME}?`, "It is deactivated now, then its workers are stopped and it is removed (checkpoints included).", [
        { name: "wait", label: "seconds deactivated before the kill", value: "0", type: "number", size: 5 }]);
      if (v) act("kill", `/kill/${encodeURIComponent(v.wait || 0)}`);
    });
  }

  // -- polling ------------------------------------------------------------------------------------
  function showMissing() {
    if (state.missing) return;
    state.missing = true;
    document.querySelector("main").replaceChildren(el("section", { class: "panel", "data-testid": "missing" },
      el("h2", {}, `No topology named ${NAME}`), el("p", {}, "It may have been killed. ", el("a", { href: "/" }, "Back to the cluster"))));
  }

  async function refresh() {
    if (state.missing) return;
    const began = performance.now();
    let doc, sups, migr, otd;
    try {
      [doc, sups, migr, otd] = await Promise.all([api(BASE), api("/api/v1/supervisor/summary"), api(BASE + "/migrations"), api(BASE + "/otd")]);
    } catch (e) {
      if (e.status === 404) showMissing();
      throw e;
    }
    const fetched = performance.now();
    state.doc = doc;
    state.sups = sups;
    const parts = {};
    const timed = (name, fn) => { const t = performance.now(); fn(); parts[name] = performance.now() - t; };
    timed("header", () => { renderHeader(doc); renderSummary(doc); });
    timed("latency", () => renderLatency(doc));
    timed("dag", () => renderDag(doc));
    timed("placement", () => renderPlacement(doc, sups));
    timed("components", () => renderComponents(doc));
    timed("timeline", () => renderTimeline(migr, otd));
    timed("rest", () => { renderSections(doc); renderMetrics(doc); renderConfig(doc); });
    state.parts = parts; // what each part of the last refresh took (ms)
    if (state.selected) refreshComponent().catch(() => {});
    state.renders += 1;
    state.lastRenderMs = performance.now() - began;
    state.lastDrawMs = performance.now() - fetched; // of which building the page, the rest is the four GETs
    if (state.firstRenderAt === null) { state.firstRenderAt = performance.now(); state.firstDrawMs = state.lastDrawMs; }
    if (!state.traffic) drawHeatmap();
  }

  async function refreshTraffic() {
    if (state.missing) return;
    const [dag, heat] = await Promise.all([api(BASE + "/traffic?window=10"), api(BASE + "/traffic?window=" + state.trafficWindow)]);
    state.dagTraffic = dag;
    state.traffic = heat;
    if (state.doc) { renderDag(state.doc); drawHeatmap(); }
  }

  wireActions();
  wirePlacement();
  wireHeatmap();
  const poller = NS.poll(refresh, 2000);
  const trafficPoller = NS.poll(refreshTraffic, 5000);
})();
