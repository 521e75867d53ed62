/* What both pages share: API calls (503 -> "cluster unreachable"), formatting, small DOM helpers.
   Plain JavaScript: every asset is served by the UI daemon, nothing from a CDN. */
"use strict";

const NS = (() => {
  const banner = () => document.getElementById("banner");

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  function setUnreachable(message) {
    const b = banner();
    if (!b) return;
    if (message) { b.textContent = message; b.hidden = false; } else { b.hidden = true; }
  }

  async function api(path, options = {}) {
    let resp;
    try {
      resp = await fetch(path, { headers: { "Accept": "application/json" }, credentials: "same-origin", ...options });
    } catch (e) {
      setUnreachable("UI unreachable: " + e.message);
      throw new ApiError(0, "UI unreachable");
    }
    let body = null;
    try { body = await resp.json(); } catch (e) { body = null; }
    if (resp.status === 503) {
      setUnreachable("cluster unreachable: " + ((body && body.errorMessage) || "ZooKeeper does not answer") +
                     " (retrying)");
      throw new ApiError(503, (body && body.errorMessage) || "cluster unreachable");
    }
    setUnreachable(null);
    if (!resp.ok) throw new ApiError(resp.status, (body && body.errorMessage) || resp.statusText);
    return body;
  }

  function post(path, body) {
    return api(path, { method: "POST", headers: { "Content-Type": "application/json", "Accept": "application/json" },
                       body: JSON.stringify(body || {}) });
  }

  /* Run ``fn`` now and then every ``ms`` after it finishes (never two at once). */
  function poll(fn, ms) {
    let timer = null;
    const run = async () => {
      try { await fn(); } catch (e) { if (!(e instanceof ApiError)) console.error(e); }
      timer = setTimeout(run, ms);
    };
    run();
    return { now() { clearTimeout(timer); run(); } };
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  const nf = new Intl.NumberFormat("en-US");
  function num(v) { return v === null || v === undefined || v === "" ? "–" : nf.format(Math.round(Number(v))); }
  function rate(v) {
    if (v === null || v === undefined) return "–";
    v = Number(v);
    if (v >= 1e6) return (v / 1e6).toFixed(2) + "M/s";
    if (v >= 1e4) return (v / 1e3).toFixed(1) + "k/s";
    return nf.format(Math.round(v)) + "/s";
  }
  function ms(v) { return v === null || v === undefined ? "–" : Number(v).toFixed(Number(v) < 10 ? 3 : 1) + " ms"; }
  function clock(secs) {
    if (!secs) return "–";
    const d = new Date(secs * 1000);
    return d.toLocaleTimeString([], { hour12: false });
  }
  function ago(secs) {
    if (secs === null || secs === undefined) return "–";
    const s = Math.max(0, Math.round(Date.now() / 1000 - secs));
    return s < 120 ? s + "s ago" : s < 7200 ? Math.round(s / 60) + "m ago" : Math.round(s / 3600) + "h ago";
  }
  /* Load colour: green (idle) -> yellow -> red (capacity 1: cannot keep up). */
  function loadColour(x) {
    if (x === null || x === undefined || isNaN(x)) return null;
    const c = Math.max(0, Math.min(1, Number(x)));
    const hue = 130 - 130 * c;
    return `hsl(${hue.toFixed(0)}, ${60 + 15 * c}%, ${40 + 4 * Math.sin(Math.PI * c)}%)`;
  }

  let toastTimer = null;
  function toast(message, bad) {
    let t = document.getElementById("toast");
    if (!t) { t = el("div", { id: "toast", role: "status" }); document.body.append(t); }
    t.textContent = message;
    t.className = "show" + (bad ? " bad" : "");
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { t.className = ""; }, bad ? 6000 : 3000);
  }

  /* A <dialog> that asks to confirm; resolves with the form's values, or null. */
  function confirmDialog(title, text, fields) {
    return new Promise((resolve) => {
      const inputs = {};
      const rows = (fields || []).map((f) => {
        const input = f.options
          ? el("select", { name: f.name }, f.options.map((o) => el("option", { value: o, selected: o === f.value }, o)))
          : el("input", { name: f.name, value: f.value ?? "", type: f.type || "text", size: f.size || 10 });
        inputs[f.name] = input;
        return el("div", { class: "row" }, el("label", {}, f.label + " ", input), f.help ? el("div", { class: "muted" }, f.help) : null);
      });
      const ok = el("button", { class: "danger", "data-testid": "confirm-ok", type: "submit" }, "Confirm");
      const cancel = el("button", { type: "button" }, "Cancel");
      const dialog = el("dialog", { "data-testid": "confirm" },
        el("form", { method: "dialog" }, el("h3", {}, title), el("p", {}, text), rows, el("div", { class: "actions" }, ok, cancel)));
      document.body.append(dialog);
      let result = null;
      ok.addEventListener("click", () => {
        result = {};
        for (const [k, input] of Object.entries(inputs)) result[k] = input.value;
      });
      cancel.addEventListener("click", () => dialog.close());
      dialog.addEventListener("close", () => { dialog.remove(); resolve(result); });
      dialog.showModal();
    });
  }

  // A dialog that shows what ``render`` makes of ``path``'s answer, asked again every 2 s until it
  // is closed (a worker's log, a supervisor's, the sampled tuples); ``actions``: more buttons.
  function liveDialog(title, body, path, render, actions = []) {
    const dialog = el("dialog", { class: "wide" }, el("h3", {}, title), body,
      el("div", { class: "actions" }, ...actions, el("button", { onclick: () => dialog.close() }, "Close")));
    let timer = null, closed = false;
    const load = async () => {
      try { render(await api(path)); } catch (e) { body.textContent = e.message; }
      if (!closed) timer = setTimeout(load, 2000);  // (closed while the answer was on its way: no more)
    };
    dialog.addEventListener("close", () => { closed = true; clearTimeout(timer); dialog.remove(); });
    document.body.append(dialog);
    dialog.showModal();
    load();
    return dialog;
  }

  // The tail of a log in a <pre>, kept scrolled to its end unless the reader scrolled up.
  function logRenderer(pre) {
    return (data) => {
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.textContent = data.lines.join("\n") || "(empty)";
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    };
  }

  return { api, post, poll, el, num, rate, ms, clock, ago, loadColour, toast, confirmDialog, liveDialog, logRenderer,
    ApiError, setUnreachable };
})();
