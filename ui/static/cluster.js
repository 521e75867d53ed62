/* The cluster page: supervisors, slots, topologies, Nimbus; polled every 2 s. */
"use strict";
(() => {
  const { api, el, num, liveDialog, logRenderer } = NS;

  function card(k, v) { return el("div", { class: "card" }, el("div", { class: "v" }, v), el("div", { class: "k" }, k)); }

  async function refresh() {
    const [summary, sups, topos, nimbus] = await Promise.all([
      api("/api/v1/cluster/summary"), api("/api/v1/supervisor/summary"),
      api("/api/v1/topology/summary"), api("/api/v1/nimbus/summary")]);
    document.getElementById("summary").replaceChildren(
      card("supervisors", num(summary.supervisors)), card("slots used / total", `${summary.slotsUsed} / ${summary.slotsTotal}`),
      card("topologies", num(summary.topologies)), card("executors", num(summary.executorsTotal)),
      card("nimbus leader", summary.nimbusLeader || "none"), card("version", summary.nstormVersion));
    const tbody = document.querySelector("#topologies tbody");
    tbody.replaceChildren(...topos.topologies.map((t) => el("tr", { "data-topology": t.name },
      el("td", {}, el("a", { href: "/topology/" + encodeURIComponent(t.name) }, t.name)),
      el("td", {}, el("span", { class: "badge " + t.status }, t.status)), el("td", {}, t.uptime),
      el("td", { class: "num" }, num(t.workersTotal)), el("td", { class: "num" }, num(t.executorsTotal)),
      el("td", { class: "num" }, t.planVersion === null ? "–" : "v" + t.planVersion), el("td", {}, t.scheduler))));
    document.querySelector("#topologies .empty").hidden = topos.topologies.length > 0;
    document.querySelector("#supervisors tbody").replaceChildren(...sups.supervisors.map((s) => el("tr", { "data-supervisor": s.id },
      el("td", {}, s.id, " ", el("a", { href: "#", class: "log", "data-testid": "supervisor-log",
        onclick: (e) => { e.preventDefault(); showLog(s.id); } }, "log")), el("td", {}, s.host), el("td", {}, s.uptime), el("td", { class: "num" }, `${s.slotsUsed} / ${s.slotsTotal}`),
      el("td", {}, s.slots.map((slot) => el("span", { class: "badge", title: slot.topology || "free", style: slot.topology ? "background:#dbe7fb" : null },
        `${slot.port}${slot.topology ? " " + slot.topology : ""}`), " ")))));
    document.querySelector("#nimbuses tbody").replaceChildren(...nimbus.nimbuses.map((n) => el("tr", {},
      el("td", {}, n.host), el("td", {}, n.pid ?? "–"), el("td", {}, n.status), el("td", {}, n.version))));
  }

  // Storm's daemonlog: the supervisor's own log, from its node's logviewer.
  function showLog(node) {
    const pre = el("pre", { class: "log", "data-testid": "log" }, "loading…");
    liveDialog(`Log of supervisor ${node}`, pre, `/api/v1/supervisor/${encodeURIComponent(node)}/log?lines=400`, logRenderer(pre));
  }

  NS.poll(refresh, 2000);
})();
