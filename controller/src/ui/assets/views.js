// The pages, built as DOM nodes (text always goes in as text, never as
// markup, so nothing a task or worker reports can inject into the page).
"use strict";

const Views = (() => {
  function h(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null && v !== false) e.setAttribute(k, String(v));
    }
    for (const k of kids.flat(Infinity)) {
      if (k === null || k === undefined || k === false) continue;
      e.appendChild(typeof k === "string" || typeof k === "number" ? document.createTextNode(String(k)) : k);
    }
    return e;
  }

  const badge = (state) => h("span", { class: `badge ${state}`, "data-state": state }, state);
  const when = (ms) => (ms > 0 ? new Date(ms).toLocaleString() : "—");
  const short = (sha) => (sha ? sha.slice(0, 10) : "—");
  const enc = encodeURIComponent;
  const taskHref = (swarm, id) => `#/task/${enc(swarm)}/${enc(id)}`;
  const cost = (u) => (u && u.cost_usd ? `$${u.cost_usd.toFixed(2)}` : "");

  function kv(pairs) {
    return h("dl", { class: "kv" }, pairs.filter(([, v]) => v !== "" && v !== undefined)
      .map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
  }

  // The forge's URL is the forge's text: linked only when it is http(s).
  function pullRequest(f) {
    const safe = /^https?:\/\//.test(f.pull_url || "");
    const what = f.pull_number
      ? [safe ? h("a", { href: f.pull_url, rel: "noopener noreferrer" }, `#${f.pull_number}`) : `#${f.pull_number}`,
         ` (${f.pull_state})`, f.merge_commit ? ` as ${short(f.merge_commit)}` : ""]
      : [f.pushed ? `${short(f.pushed)} pushed to ${f.remote_branch}` : `not pushed yet (${f.provider})`];
    return [what, f.checks ? ` — checks: ${f.checks}` : "", f.error ? h("div", { class: "fail" }, f.error) : null];
  }

  // A planned swarm's goal and what planning cost, which is not part of
  // the swarm's own cost (nor of its budget).
  function origin(o) {
    const issue = /^https?:\/\//.test(o.issue_url || "")
      ? h("a", { href: o.issue_url, rel: "noopener noreferrer" }, o.issue_url) : (o.issue_url || "");
    const by = [o.planner_agent || "a planner", o.planner_session ? ` session ${o.planner_session}` : "",
      ` cost $${(o.planner_usage.cost_usd || 0).toFixed(4)}`].join("");
    return [
      ["goal", h("div", { class: "goal", id: "goal" }, o.goal)],
      ["planned by", h("span", { id: "planned-by" }, by)],
      ["issue", issue],
    ];
  }

  function counts(byState) {
    return h("div", { class: "legend" },
      Object.entries(byState).map(([s, n]) => h("span", { class: `badge ${s}` }, `${s} ${n}`)));
  }

  function swarms(list) {
    if (!list.length) return h("div", {}, h("h1", {}, "Swarms"), h("p", { class: "muted" }, "No swarms yet: swarmctl create PLAN."));
    return h("div", {}, h("h1", {}, "Swarms"), h("table", { id: "swarms" },
      // A planned swarm's planning is not in its cost; its page shows it apart.
      h("thead", {}, h("tr", {}, ["swarm", "state", "tasks", "by state", "integration", "created", "cost"].map((c) =>
        h("th", c === "cost" ? { title: "what its agents spent (planning is shown apart, on the swarm's page)" } : {}, c)))),
      h("tbody", {}, list.map((s) => h("tr", { "data-swarm": s.id },
        h("td", {}, h("a", { href: `#/swarm/${enc(s.id)}` }, s.id)),
        h("td", {}, badge(s.state)),
        h("td", {}, s.task_count),
        h("td", {}, counts(s.tasks_by_state)),
        h("td", {}, h("code", {}, `${s.integration_branch} @ ${short(s.integration_head)}`)),
        h("td", {}, when(s.created_at_unix_ms)),
        h("td", {}, cost(s.usage)))))));
  }

  // Above this many tasks the graph is not drawn: the table still lists them.
  const MAX_DRAWN = 3000;

  function swarm(page) {
    const s = page.swarm;
    const merged = s.tasks_by_state.MERGED || 0;
    const graph = page.tasks.length <= MAX_DRAWN
      ? h("div", { class: "dag", id: "dag" }, SwarmDag.render(page.tasks, (t) => taskHref(s.id, t.task)))
      : h("p", { class: "muted" }, `${page.tasks.length} tasks: too many to draw; see the table.`);
    return h("div", { id: "swarm", "data-swarm": s.id },
      h("h1", {}, "Swarm ", h("code", {}, s.id), " ", badge(s.state)),
      kv([
        ["progress", `${merged} of ${s.task_count} merged`],
        ["base", s.base_branch], ["integration", `${s.integration_branch} @ ${short(s.integration_head)}`],
        ["created", when(s.created_at_unix_ms)],
        ["cost", s.origin ? `${cost(s.usage) || "$0.00"} (its agents only; planning is shown apart)` : cost(s.usage)],
        ...(s.origin ? origin(s.origin) : []),
        ["stalled", s.stalled_reason ? `${s.stalled_reason} (${(s.stalled_tasks || []).join(", ")})` : ""],
        ["paused", s.paused_reason],
        ["durations", page.durations_text.line],
        ["pull request", s.forge ? pullRequest(s.forge) : ""],
        ["budget", s.budget_usd || s.budget_tokens
          ? [s.budget_usd ? `$${s.budget_usd.toFixed(2)}` : "", s.budget_tokens ? `${s.budget_tokens} tokens` : ""].filter(Boolean).join(", ")
          : ""],
      ]),
      counts(s.tasks_by_state),
      h("h2", {}, "Task graph"), graph,
      h("h2", {}, "Tasks"),
      h("table", { id: "tasks" },
        h("thead", {}, h("tr", {}, ["task", "state", "deps", "worker", "attempts", "step", "reason", "expected", "actual"].map((c) => h("th", {}, c)))),
        h("tbody", {}, page.tasks.map((t) => h("tr", { "data-task": t.task, "data-state": t.state },
          h("td", {}, h("a", { href: taskHref(s.id, t.task) }, t.task), t.title ? h("div", { class: "muted" }, t.title) : null),
          h("td", {}, badge(t.state), t.state === "RUNNING" && t.percent ? ` ${t.percent}%` : ""),
          h("td", {}, t.deps.join(", ")),
          h("td", {}, t.worker),
          h("td", {}, t.attempts),
          h("td", {}, t.step),
          h("td", {}, t.pending_question ? `question: ${t.pending_question}` : t.reason),
          h("td", {}, page.durations_text.expected[t.task] || "-"),
          h("td", { class: (page.durations.far_over || []).includes(t.task) ? "over" : undefined },
            page.durations_text.actual[t.task] || "-"))))));
  }

  function tiers(list) {
    if (!list.length) return h("p", { class: "muted" }, "No verify tiers reported.");
    return h("table", {},
      h("thead", {}, h("tr", {}, ["tier", "result", "exit", "time", "output (tail)"].map((c) => h("th", {}, c)))),
      h("tbody", {}, list.map((t) => h("tr", {},
        h("td", {}, t.name, t.blocking ? "" : h("span", { class: "muted" }, " (advisory)")),
        h("td", { class: t.passed ? "pass" : "fail" }, t.passed ? "passed" : "failed"),
        h("td", {}, t.exit_code), h("td", {}, `${t.duration_ms} ms`),
        h("td", {}, t.output_tail ? h("pre", {}, t.output_tail) : "")))));
  }

  function attempt(a) {
    return h("section", { class: "attempt", "data-attempt": a.number },
      h("h2", {}, `Attempt ${a.number} `, badge(a.state), a.outcome ? ` ${a.outcome}` : ""),
      kv([
        ["worker", a.worker], ["started", when(a.started_at_unix_ms)], ["ended", when(a.ended_at_unix_ms)],
        ["base", short(a.base_commit)], ["result", short(a.result_commit)], ["exit code", String(a.exit_code)],
        ["agent", a.agent], ["cost", cost(a.usage)], ["summary", a.summary], ["error", a.error],
      ]),
      h("h3", {}, "Verify tiers"), tiers(a.tiers));
  }

  function events(list, omitted) {
    return h("div", {},
      omitted ? h("p", { class: "muted" }, `${omitted} older events not shown.`) : null,
      h("table", { id: "events" },
        h("thead", {}, h("tr", {}, ["#", "at", "attempt", "kind", "message"].map((c) => h("th", {}, c)))),
        h("tbody", {}, list.map((e) => h("tr", { "data-kind": e.kind },
          h("td", {}, e.id), h("td", {}, when(e.at_unix_ms)), h("td", {}, e.attempt || ""),
          h("td", {}, h("code", {}, e.kind)), h("td", {}, e.message))))));
  }

  // The end of the latest attempt's worker output, read from its sidecar.
  function workerLog(d) {
    const t = d.log_tail;
    if (!t) return h("p", { class: "muted", id: "log-note" }, d.log);
    return h("div", {},
      h("p", { class: "muted" }, `attempt ${t.attempt} on ${t.worker}`,
        t.skipped ? `, its last ${t.text.length} characters (${t.skipped} bytes before them not shown)` : ""),
      h("pre", { id: "worker-log", "data-attempt": t.attempt }, t.text || "(empty)"));
  }

  function task(d, swarmId) {
    const t = d.task;
    const report = d.merge_report;
    return h("div", { id: "task", "data-task": t.task, "data-state": t.state },
      h("p", {}, h("a", { href: `#/swarm/${enc(swarmId)}` }, `← swarm ${swarmId}`)),
      h("h1", {}, "Task ", h("code", {}, `${t.id}`), " ", badge(t.state)),
      kv([
        ["title", t.title], ["deps", t.deps.join(", ")], ["files", t.files.join(", ")],
        ["worker", t.worker], ["attempts", `${t.attempts} (${t.retries_used} retries used)`],
        ["merge commit", t.merge_commit], ["reason", t.reason], ["step", t.step],
        ["question", t.pending_question],
        ["options", (t.pending_options || []).map((o, i) => `${i + 1}. ${o}`).join("   ")],
        ["answer with", t.pending_question ? `swarmctl answer ${t.id} <number, option or text>` : ""],
        ["cost", cost(t.usage)],
      ]),
      h("h2", {}, "Merge report"),
      report
        ? h("div", { id: "merge-report" }, h("p", {}, h("code", {}, report.kind), " ", report.message),
          report.data !== null ? h("pre", {}, JSON.stringify(report.data, null, 2)) : null)
        : h("p", { class: "muted" }, "Not merged yet."),
      d.attempts.slice().reverse().map(attempt),
      h("h2", {}, "Worker log"), workerLog(d),
      h("h2", {}, "Events"), events(d.events, d.events_omitted),
      h("h2", {}, "Prompt"), d.prompt ? h("pre", {}, d.prompt) : h("p", { class: "muted" }, "—"));
  }

  function workers(list) {
    if (!list.length) return h("div", {}, h("h1", {}, "Workers"), h("p", { class: "muted" }, "No workers have connected."));
    return h("div", {}, h("h1", {}, "Workers"), h("table", { id: "workers" },
      h("thead", {}, h("tr", {}, ["worker", "host", "status", "attempt", "heartbeat", "labels", "rate limit"].map((c) => h("th", {}, c)))),
      h("tbody", {}, list.map((w) => h("tr", { "data-worker": w.id },
        h("td", {}, w.id), h("td", {}, w.host),
        h("td", {}, w.connected ? (w.draining ? "draining" : "connected") : "gone"),
        h("td", {}, w.attempt), h("td", {}, w.connected ? `${(w.heartbeat_age_ms / 1000).toFixed(1)} s ago` : ""),
        h("td", {}, Object.entries(w.labels).map(([k, v]) => `${k}=${v}`).join(" ")),
        h("td", {}, w.rate_limited_until_unix_ms > 0 ? `until ${when(w.rate_limited_until_unix_ms)}` : ""))))));
  }

  function error(message) {
    return h("div", {}, h("h1", {}, "Error"), h("p", { class: "error" }, message));
  }

  // Where the swarm's time went: the server's SVG (made by the same code
  // as `swarmctl report --html`), parsed as XML and adopted as nodes, so
  // nothing in it is ever read as HTML and no script in it could run.
  function timeline(t) {
    const box = h("section", { id: "timeline-section" }, h("h2", {}, "Timeline"));
    if (!t.svg) {
      box.appendChild(h("p", { class: "muted" }, t.note || "No timeline."));
      return box;
    }
    const doc = new DOMParser().parseFromString(t.svg, "image/svg+xml");
    const root = doc.documentElement;
    if (root.nodeName !== "svg" || doc.getElementsByTagName("parsererror").length) {
      box.appendChild(h("p", { class: "error" }, "The timeline could not be read."));
      return box;
    }
    box.appendChild(h("p", { class: "muted", id: "timeline-summary" }, t.summary));
    box.appendChild(h("div", { class: "timeline-wrap" }, document.importNode(root, true)));
    return box;
  }

  return { swarms, swarm, task, workers, error, timeline };
})();
