/* The status page: what `arena status` shows, the daily budget (`arena budget`), the dead
 * letters (with Retry) and the routing dry run. */
"use strict";

(function () {
  const box = document.getElementById("status");
  const problem = document.getElementById("status-error");
  const deadBody = document.querySelector("#dead-letters tbody");
  const deadError = document.getElementById("dead-error");
  const routeForm = document.getElementById("route");
  const routeText = document.getElementById("route-text");
  const routeResult = document.getElementById("route-result");
  const budgetBody = document.querySelector("#budget tbody");
  const budgetHint = document.getElementById("budget-hint");
  const budgetReset = document.getElementById("budget-reset");
  const budgetError = document.getElementById("budget-error");
  const budgetCount = document.getElementById("budget-count");
  const el = arena.el;
  const TALL = 10; // rows: a longer table scrolls in its own box

  /* A table in a box of its own: wide, it scrolls sideways; long, it scrolls down. */
  function table(headers, rows) {
    return el("div", {class: rows.length > TALL ? "scroll tall" : "scroll"}, el("table", {class: "list"},
      el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", {}, h)))),
      el("tbody", {}, ...(rows.length ? rows : [el("tr", {class: "empty"}, el("td", {colspan: headers.length}, "none"))]))));
  }

  /* A card of the grid; a wide one (tables of many columns) takes a whole row. */
  function card(title, ...content) {
    return el("div", {class: "card"}, el("h2", {}, title), ...content);
  }

  function wideCard(title, ...content) {
    const made = card(title, ...content);
    made.classList.add("wide");
    return made;
  }

  function facts(pairs) {
    return el("dl", {class: "facts"}, ...pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  }

  function daemons(streams) {
    const rows = (streams.consumers || []).map((c) => el("tr", {},
      el("td", {}, c.name), el("td", {class: "num"}, arena.number(c.pending)),
      el("td", {class: "num"}, typeof c.idle_ms === "number" ? (c.idle_ms / 1000).toFixed(1) + " s" : "–")));
    const partitions = (streams.partitions || []).map((p) => el("tr", {},
      el("td", {}, String(p.index ?? p.partition ?? "")), el("td", {}, p.owner || p.holder || "–"),
      el("td", {class: "num"}, arena.number(p.length)), el("td", {class: "num"}, arena.number(p.pending))));
    return card("Daemons and streams",
      facts([
        ["daemons", (streams.daemons || []).join(", ") || "none running"],
        ["inbox length", arena.number(streams.inbox_length)],
        ["pending", arena.number(streams.pending)],
        ["lag", streams.lag === null || streams.lag === undefined ? "–" : arena.number(streams.lag)],
        ["oldest pending", ((streams.oldest_pending_idle_ms || 0) / 1000).toFixed(1) + " s"],
        ["dead letters", arena.number(streams.dead_letters)],
      ]),
      table(["consumer", "pending", "idle"], rows),
      partitions.length ? table(["partition", "held by", "length", "pending"], partitions) : null);
  }

  function groups(list) {
    return wideCard("Groups", table(["group", "messages", "last activity", "outbox"], list.map((g) => el("tr", {},
      el("td", {}, el("a", {href: "/groups/" + encodeURIComponent(g.group)}, g.group)),
      el("td", {class: "num"}, arena.number(g.messages)), el("td", {}, arena.when(g.last_at)),
      el("td", {class: "num"}, arena.number(g.outbox_length))))));
  }

  /* A hand edit of MEMORY.md is a person's, never a heartbeat: said as what came of it. */
  const HAND_EDIT = {written: "saved", rejected: "refused", conflict: "conflicted"};

  function handEdit(edit) {
    if (!edit) return "–";
    const version = edit.version ? " (v" + edit.version + ")" : "";
    return "hand edit " + (HAND_EDIT[edit.status] || edit.status) + " " + arena.when(edit.at) + version +
      (edit.reason ? ": " + edit.reason : "");
  }

  function agents(list) {
    const headers = ["agent", "role", "model", "MEMORY.md", "last heartbeat", "last hand edit"];
    return wideCard("Agents", table(headers, list.map((a) => {
      if (a.error) return el("tr", {}, el("td", {colspan: headers.length, class: "error"}, a.error));
      const beat = a.heartbeat || {};
      const last = beat.last_failed ? "failed " + arena.when(beat.last_failed.at) + ": " + beat.last_failed.reason
        : beat.last_ok ? "ok " + arena.when(beat.last_ok.at) : "never";
      const edit = beat.last_hand_edit;
      return el("tr", {dataset: {agent: a.id}}, el("td", {}, a.name + (a.default ? " (default)" : "")), el("td", {}, a.role),
        el("td", {}, a.model), el("td", {}, beat.memory_md_version ? "v" + beat.memory_md_version : "–"),
        el("td", {class: "text heartbeat" + (beat.last_failed ? " error" : "")}, last),
        el("td", {class: "text hand-edit" + (edit && edit.status !== "written" ? " error" : "")}, handEdit(edit)));
    })));
  }

  function background(workers, jobs) {
    return wideCard("Background work",
      facts([
        ["queued", arena.number(jobs.queued) + (jobs.oldest_queued_s ? " (oldest " + jobs.oldest_queued_s.toFixed(0) + " s)" : "")],
        ["running", arena.number(jobs.running)], ["retrying", arena.number(jobs.retrying)], ["failed", arena.number(jobs.failed)],
      ]),
      table(["worker", "state", "queues", "heartbeat"], workers.map((w) => el("tr", {},
        el("td", {}, w.name), el("td", {}, w.state), el("td", {}, (w.queues || []).join(", ")),
        el("td", {}, typeof w.heartbeat_age_s === "number" ? w.heartbeat_age_s.toFixed(0) + " s ago" : "–")))));
  }

  function storage(s) {
    return card("Storage", facts([
      ["database", s.database.dialect + (typeof s.database.bytes === "number" ? ", " + arena.bytes(s.database.bytes) : "")],
      ["messages", arena.number(s.messages)],
      ["memories", arena.number(s.memories.active) + " active of " + arena.number(s.memories.total)],
      ["workspaces", arena.bytes(s.workspaces_bytes)], ["data", arena.bytes(s.data_bytes)],
      ["history kept", s.history_retention_days + " days"],
    ]));
  }

  async function load() {
    try {
      const s = await arena.api("/api/status");
      const parts = [];
      if (s.stuck && s.stuck.length) parts.push(el("div", {class: "card alert"}, el("h2", {}, "Needs attention"), el("ul", {}, ...s.stuck.map((x) => el("li", {}, x)))));
      parts.push(daemons(s.streams || {}), background(s.workers || [], s.jobs || {}), agents(s.agents || []), groups(s.groups || []));
      if (s.storage) parts.push(storage(s.storage));
      box.replaceChildren(...parts);
      arena.show(problem, "");
    } catch (error) {
      arena.show(problem, error.message);
    }
    await Promise.all([loadBudget(), loadDeadLetters()]);
  }

  function usd(n) {
    if (typeof n !== "number") return "–";
    return "$" + (n > 0 && n < 0.01 ? n.toFixed(4) : n.toFixed(2));
  }

  /* "used" or "used / cap" when the row is capped. */
  function ofCap(used, cap) {
    return cap === null || cap === undefined ? used : used + " / " + cap;
  }

  /* The row's fullest cap, as a share (null: not capped). */
  function share(today) {
    const shares = [];
    if (today.tokens_cap) shares.push(today.tokens / today.tokens_cap);
    if (today.usd_cap) shares.push(today.usd / today.usd_cap);
    return shares.length ? Math.max(...shares) : null;
  }

  function budgetRow(row) {
    const today = row.today || {};
    const week = row.last_days || {};
    const used = share(today);
    const level = used === null ? "" : used >= 1 ? "over" : used >= 0.8 ? "near" : "";
    const percent = used === null ? "" : Math.floor(100 * used) + " %";
    const mark = level === "over" ? "cap reached (" + percent + ")" : level === "near" ? "⚠ " + percent + " used" : percent || "–";
    return el("tr", {class: level ? "budget-" + level : null, dataset: {scope: row.scope, name: row.name}},
      el("td", {}, row.scope), el("td", {}, row.name === "*" ? "all agents" : row.name),
      el("td", {class: "num"}, ofCap(arena.number(today.tokens), today.tokens_cap ? arena.number(today.tokens_cap) : null)),
      el("td", {class: "num"}, ofCap(usd(today.usd), today.usd_cap ? usd(today.usd_cap) : null)),
      el("td", {class: "num"}, arena.number(week.tokens)), el("td", {class: "num"}, usd(week.usd)),
      el("td", {class: "mark"}, mark));
  }

  async function loadBudget() {
    try {
      const report = await arena.api("/api/budget");
      const rows = report.rows || [];
      budgetBody.replaceChildren(...(rows.length ? rows.map(budgetRow)
        : [el("tr", {class: "empty"}, el("td", {colspan: 7}, "No model calls counted in the last " + report.days + " days."))]));
      const marked = budgetBody.querySelectorAll("tr.budget-near, tr.budget-over").length;
      arena.show(budgetCount, rows.length > TALL ? arena.number(rows.length) + " rows; " +
        (marked ? marked + " of them at 80 % or more of a cap (marked)." : "none near a cap.") : "");
      budgetReset.textContent = "Caps reset " + arena.when(report.resets_at) + ".";
      arena.show(budgetHint, report.caps_set ? "" : "No caps set: no model call is refused. An ARENA_CAP_… setting or an agent's caps: sets one.");
      arena.show(budgetError, "");
    } catch (error) {
      arena.show(budgetError, error.message);
    }
  }

  async function loadDeadLetters() {
    try {
      const data = await arena.api("/api/dead-letters");
      const letters = data.dead_letters || [];
      deadBody.replaceChildren(...(letters.length ? letters.map(letterRow)
        : [el("tr", {class: "empty"}, el("td", {colspan: 6}, "No dead letters."))]));
      arena.show(deadError, "");
    } catch (error) {
      arena.show(deadError, error.message);
    }
  }

  function letterRow(letter) {
    const button = el("button", {type: "button", class: "small"}, "Retry");
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        const done = await arena.api("/api/dead-letters/" + encodeURIComponent(letter.id) + "/retry", {method: "POST"});
        arena.show(deadError, "");
        button.replaceWith(el("span", {class: "ok"}, "posted as " + done.id));
      } catch (error) {
        button.disabled = false;
        arena.show(deadError, error.message);
      }
    });
    return el("tr", {}, el("td", {}, letter.id), el("td", {}, letter.group || ""), el("td", {}, letter.sender || ""),
      el("td", {class: "text"}, letter.text || ""), el("td", {class: "text"}, letter.reason || ""), el("td", {}, button));
  }

  routeForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const decision = await arena.api("/api/route?" + new URLSearchParams({text: routeText.value}));
      routeResult.textContent = JSON.stringify(decision, null, 2);
    } catch (error) {
      routeResult.textContent = error.message;
    }
    routeResult.hidden = false;
  });

  document.getElementById("refresh").addEventListener("click", load);
  load();
  window.setInterval(load, 15000);
})();
