// Routing (#/, #/swarm/S, #/task/S/T, #/workers), reads from /api, and live
// updates: one EventSource on /api/events; an event that concerns the page
// shown re-reads it (a burst of events costs one read, and reads are spaced
// by a few times what the last one took, so a large swarm is not re-read
// faster than it can be drawn), and so does every (re)connection, so what
// happened while disconnected is never missed.
"use strict";

(() => {
  const view = document.getElementById("view");
  const live = document.getElementById("live");
  let gapMs = 200;
  let timer = null;
  let generation = 0;

  function route() {
    const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
    if (parts[0] === "swarm" && parts[1]) return { page: "swarm", swarm: parts[1] };
    if (parts[0] === "task" && parts[1] && parts[2]) return { page: "task", swarm: parts[1], task: parts[2] };
    if (parts[0] === "workers") return { page: "workers" };
    return { page: "swarms" };
  }

  async function get(path) {
    const r = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (r.status === 401) {
      location.href = "/login";
      throw new Error("not logged in");
    }
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || `${r.status}`);
    return body;
  }

  async function render() {
    const started = performance.now();
    const mine = ++generation;
    const r = route();
    const enc = encodeURIComponent;
    let node;
    try {
      if (r.page === "swarm") {
        // A timeline that cannot be made costs the page its timeline only.
        const [page, timeline] = await Promise.all([get(`/api/swarms/${enc(r.swarm)}`),
          get(`/api/swarms/${enc(r.swarm)}/timeline`).catch((e) => ({ note: `No timeline: ${e.message}` }))]);
        node = Views.swarm(page);
        // Above the task graph: a slow swarm's first question is where its time went.
        const graph = [...node.querySelectorAll("h2")].find((e) => e.textContent === "Task graph");
        node.insertBefore(Views.timeline(timeline), graph || null);
      } else if (r.page === "task") node = Views.task(await get(`/api/swarms/${enc(r.swarm)}/tasks/${enc(r.task)}`), r.swarm);
      else if (r.page === "workers") node = Views.workers(await get("/api/workers"));
      else node = Views.swarms(await get("/api/swarms"));
    } catch (e) {
      node = Views.error(e.message);
    }
    // A slower read of an older route must not replace a newer one.
    if (mine !== generation) return;
    const scroll = document.getElementById("dag");
    const [left, top] = scroll ? [scroll.scrollLeft, scroll.scrollTop] : [0, 0];
    view.replaceChildren(node);
    const dag = document.getElementById("dag");
    if (dag) [dag.scrollLeft, dag.scrollTop] = [left, top];
    document.body.dataset.rendered = String(mine);
    gapMs = Math.max(200, 4 * (performance.now() - started));
  }

  function soon() {
    if (timer === null) timer = setTimeout(() => { timer = null; render(); }, gapMs);
  }

  // Whether an event can change what the page shows.
  function concerns(data) {
    let e;
    try { e = JSON.parse(data); } catch { return true; }
    const r = route();
    if (r.page === "swarm") return e.swarm === r.swarm;
    if (r.page === "task") return e.swarm === r.swarm && (e.task === r.task || e.task === "");
    if (r.page === "workers") return e.worker !== "" || e.kind.startsWith("worker.");
    return true;
  }

  function connect() {
    const source = new EventSource("/api/events");
    source.onopen = () => { live.dataset.live = "open"; live.textContent = "live"; soon(); };
    source.onmessage = (m) => { if (concerns(m.data)) soon(); };
    source.onerror = () => { live.dataset.live = "connecting"; live.textContent = "reconnecting"; };
  }

  window.addEventListener("hashchange", render);
  render();
  connect();
})();
