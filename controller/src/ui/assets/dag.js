// The task graph as SVG, laid out here with no library: tasks are layered
// by dependency depth (a task sits one column right of its deepest
// dependency), each column is ordered by the mean row of the task's
// dependencies to keep edges short and uncrossed, and edges are curves from
// a dependency's right side to its dependent's left side.
"use strict";

const SwarmDag = (() => {
  const W = 168, H = 42, GAP_X = 56, GAP_Y = 14, PAD = 12;
  const SVG = "http://www.w3.org/2000/svg";
  const COLORS = {
    PENDING: "#c9c9cf", READY: "#8ab4f8", RUNNING: "#4285f4", SUCCEEDED: "#81c995",
    MERGING: "#34a853", MERGED: "#188038", CONFLICT: "#f29900", FAILED: "#d93025",
    BLOCKED: "#a142f4", ESCALATED: "#e37400", CANCELLED: "#80868b", UNKNOWN: "#5f6368",
    REVIEW: "#fbbc04", REJECTED: "#a50e0e",
  };

  // A dependency may be written with its swarm ("s/a") or without ("a").
  function depIds(task) {
    return task.deps.map((d) => (d.includes("/") ? d.slice(d.indexOf("/") + 1) : d));
  }

  // Columns by depth, in Kahn's order, so a long chain needs no recursion.
  // A task on a cycle (a plan never has one) goes in a last column.
  function depths(tasks) {
    const ids = new Set(tasks.map((t) => t.task));
    const indeg = new Map(), children = new Map(), depth = new Map();
    for (const t of tasks) {
      const deps = depIds(t).filter((d) => ids.has(d));
      indeg.set(t.task, deps.length);
      for (const d of deps) {
        if (!children.has(d)) children.set(d, []);
        children.get(d).push(t.task);
      }
    }
    const queue = tasks.filter((t) => indeg.get(t.task) === 0).map((t) => t.task);
    for (const id of queue) depth.set(id, 0);
    for (let i = 0; i < queue.length; i++) {
      const id = queue[i];
      for (const c of children.get(id) || []) {
        depth.set(c, Math.max(depth.get(c) || 0, depth.get(id) + 1));
        indeg.set(c, indeg.get(c) - 1);
        if (indeg.get(c) === 0) queue.push(c);
      }
    }
    let last = 0;
    for (const d of depth.values()) last = Math.max(last, d + 1);
    for (const t of tasks) if (!depth.has(t.task)) depth.set(t.task, last);
    return depth;
  }

  // Positions {id: {x, y}} and the drawing's size.
  function layout(tasks) {
    const depth = depths(tasks);
    const order = new Map(tasks.map((t, i) => [t.task, i]));
    const columns = [];
    for (const t of tasks) {
      const d = depth.get(t.task);
      while (columns.length <= d) columns.push([]);
      columns[d].push(t);
    }
    const row = new Map();
    columns.forEach((col, c) => {
      if (c > 0) {
        const mean = (t) => {
          const rows = depIds(t).filter((d) => row.has(d)).map((d) => row.get(d));
          return rows.length ? rows.reduce((a, b) => a + b, 0) / rows.length : order.get(t.task);
        };
        const key = new Map(col.map((t) => [t.task, mean(t)]));
        col.sort((a, b) => key.get(a.id) - key.get(b.id) || order.get(a.id) - order.get(b.id));
      }
      col.forEach((t, r) => row.set(t.task, r));
    });
    const pos = new Map();
    columns.forEach((col, c) =>
      col.forEach((t, r) => pos.set(t.task, { x: PAD + c * (W + GAP_X), y: PAD + r * (H + GAP_Y) })));
    const tallest = columns.reduce((m, c) => Math.max(m, c.length), 1);
    return {
      pos,
      width: PAD * 2 + columns.length * (W + GAP_X) - GAP_X,
      height: PAD * 2 + tallest * (H + GAP_Y) - GAP_Y,
    };
  }

  function el(name, attrs, text) {
    const e = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function clip(s, n) {
    return s.length > n ? s.slice(0, n - 1) + "…" : s;
  }

  // An <svg> of the swarm's tasks; each node links to `href(task)`.
  function render(tasks, href) {
    const { pos, width, height } = layout(tasks);
    const svg = el("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
    svg.appendChild(el("title", {}, `task graph: ${tasks.length} tasks`));
    const edges = el("g", { class: "edges" });
    for (const t of tasks) {
      const to = pos.get(t.task);
      for (const d of depIds(t)) {
        const from = pos.get(d);
        if (!from) continue;
        const [x1, y1, x2, y2] = [from.x + W, from.y + H / 2, to.x, to.y + H / 2];
        const mid = (x1 + x2) / 2;
        edges.appendChild(el("path", {
          class: "edge", "data-from": d, "data-to": t.task,
          d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`,
        }));
      }
    }
    svg.appendChild(edges);
    for (const t of tasks) {
      const p = pos.get(t.task);
      const link = el("a", { href: href(t) });
      const g = el("g", { class: "node", "data-task": t.task, "data-state": t.state, transform: `translate(${p.x},${p.y})` });
      g.appendChild(el("title", {}, `${t.task}: ${t.title || ""}\n${t.state}${t.reason ? " — " + t.reason : ""}`));
      g.appendChild(el("rect", { width: W, height: H, fill: COLORS[t.state] || COLORS.UNKNOWN }));
      g.appendChild(el("text", { x: 8, y: 17 }, clip(t.task, 24)));
      const sub = t.state === "RUNNING" && t.percent ? `${t.state} ${t.percent}%` : t.state;
      g.appendChild(el("text", { x: 8, y: 33, class: "sub" }, sub + (t.worker ? ` · ${clip(t.worker, 12)}` : "")));
      link.appendChild(g);
      svg.appendChild(link);
    }
    return svg;
  }

  return { layout, render, COLORS };
})();
