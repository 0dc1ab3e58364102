/* The context inspector: an agent's next turn in a group, layer by layer against its budget,
 * recall's candidates kept and left out (and why), and the text the model would be sent; for
 * a past reply, the memory tools it called and each model call's tokens. */
"use strict";

(function () {
  const el = arena.el;
  const form = document.getElementById("ask");
  const problem = document.getElementById("context-error");
  const params = new URLSearchParams(window.location.search);
  const LAYERS = ["identity", "summary", "memory_md", "logs", "recall", "history", "overhead"];

  function layers(report, budgets) {
    const tokens = report.tokens || {};
    const total = tokens.total || 1;
    const bar = el("div", {class: "bar big", role: "img", "aria-label": "context tokens by layer"});
    const rows = [];
    LAYERS.forEach((name) => {
      const used = tokens[name] || 0;
      if (used) {
        const seg = el("span", {class: "seg layer-" + name, title: `${name}: ${used} tokens`});
        seg.style.width = ((100 * used) / total).toFixed(2) + "%";
        bar.append(seg);
      }
      const budget = budgets[name];
      rows.push(el("tr", {}, el("td", {}, el("span", {class: "swatch layer-" + name}), name),
        el("td", {class: "num"}, arena.number(used)),
        el("td", {class: "num"}, budget === undefined ? "–" : arena.number(budget)),
        el("td", {}, budget !== undefined && used > budget ? "over" : "")));
    });
    const table = el("div", {class: "scroll"}, el("table", {class: "list"},
      el("thead", {}, el("tr", {}, el("th", {}, "layer"), el("th", {}, "tokens"), el("th", {}, "budget"), el("th", {}, ""))),
      el("tbody", {}, ...rows)));
    const facts = el("p", {class: "hint"}, `${arena.number(tokens.total)} tokens of a ${arena.number(report.window)}-token window ` +
      `(${arena.number(report.reserved_output)} kept for the answer); ${report.history_messages} messages of history`);
    return [bar, facts, table];
  }

  function recall(report) {
    const cited = new Map((report.citations || []).map((c) => [String(c.id), c]));
    const passage = (item) => String(item).startsWith("chunk ") ? cited.get(String(item)) : undefined;
    const label = (item) => {
      const found = passage(item);
      if (found && found.ref) return found.ref;
      return typeof item === "number" ? "memory #" + item : String(item);
    };
    const key = (item) => String(item).startsWith("chunk ") ? String(item) : String(item).replace(/^(memory|message) #?/, "");
    const why = (item) => { const found = passage(item); return found && found.why ? "kept: " + found.why : "kept"; };
    /* A passage's locator links to the knowledge page, which shows its lines now. */
    const labelled = (item) => {
      const found = passage(item);
      if (!found || !found.ref) return label(item);
      return el("a", {href: "/knowledge?locator=" + encodeURIComponent(found.ref), class: "locator"}, found.ref);
    };
    const rows = (report.recall || []).map((item) => el("tr", {},
      el("td", {}, labelled(item)), el("td", {}, (cited.get(key(item)) || {}).trust || ""), el("td", {class: "ok"}, why(item))));
    (report.recall_dropped || []).forEach((d) => rows.push(el("tr", {class: "dropped"},
      el("td", {}, label(d.id)), el("td", {}, ""), el("td", {class: "text"}, `left out (${d.layer}): ${d.reason}`))));
    return rows.length ? rows : [el("tr", {class: "empty"}, el("td", {colspan: 3}, "Nothing recalled."))];
  }

  /* A past reply's tool loop: one row per call, one per model call (step) with its tokens. */
  function tools(data) {
    const calls = (data && data.calls) || [];
    const steps = (data && data.steps) || [];
    document.getElementById("tools").hidden = !calls.length;
    if (!calls.length) return;
    const errors = calls.filter((c) => c.is_error).length;
    document.getElementById("tools-summary").textContent = `${calls.length} tool call${calls.length === 1 ? "" : "s"}` +
      (errors ? ` (${errors} failed)` : "") + ` over ${steps.length} model call${steps.length === 1 ? "" : "s"}`;
    document.querySelector("#tool-calls tbody").replaceChildren(...calls.map((c, i) => el("tr", {class: c.is_error ? "tool-error" : null},
      el("td", {class: "num"}, i + 1), el("td", {class: "call"}, c.line || c.name),
      el("td", {class: "num"}, arena.number(c.input_chars) + " chars"), el("td", {class: "num"}, arena.number(c.result_chars) + " chars"),
      el("td", {}, c.is_error ? "error" : "ok"))));
    const sum = (key) => steps.reduce((total, s) => total + (s[key] || 0), 0);
    const KEYS = ["input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens"];
    const row = (label, values, attrs) => el("tr", attrs || {}, el("td", {}, label), ...values.map((v) => el("td", {class: "num"}, arena.number(v))));
    document.querySelector("#tool-steps tbody").replaceChildren(
      ...steps.map((s, i) => row(`step ${i + 1}`, KEYS.map((k) => s[k] || 0), {class: "step"})),
      row("total", KEYS.map(sum), {class: "total"}));
  }

  async function show() {
    const query = new URLSearchParams();
    for (const [name, value] of new FormData(form).entries()) if (String(value).trim()) query.set(name, String(value).trim());
    window.history.replaceState(null, "", "/context?" + query);
    try {
      const data = await arena.api("/api/context?" + query);
      document.getElementById("result-title").textContent = `${data.agent} in ${data.group} · ${data.model}`;
      document.getElementById("layers").replaceChildren(...layers(data.report, data.budgets || {}));
      const decisions = data.report.decisions || [];
      document.getElementById("decisions").replaceChildren(...(decisions.length
        ? decisions.map((d) => el("li", {}, typeof d === "string" ? d : JSON.stringify(d)))
        : [el("li", {class: "hint"}, "Everything fit: nothing was cut.")]));
      document.querySelector("#recall tbody").replaceChildren(...recall(data.report));
      document.getElementById("system").textContent = data.system;
      document.getElementById("tail").textContent = data.system_tail;
      document.getElementById("messages-summary").textContent = `Layer history: the conversation (${data.messages.length} turns)`;
      tools(null);
      document.getElementById("messages").textContent = data.messages.map((m) =>
        `[${m.role}] ${typeof m.content === "string" ? m.content : JSON.stringify(m.content)}`).join("\n\n");
      document.getElementById("result").hidden = false;
      arena.show(problem, "");
    } catch (error) {
      arena.show(problem, error.message);
    }
  }

  /* A past reply's stored report (``?reply=ID``): the same view, as its turn recorded it. */
  async function showReply(id) {
    try {
      const data = await arena.api("/api/messages/" + encodeURIComponent(id) + "/report");
      document.getElementById("result-title").textContent =
        `${data.agent}'s reply ${data.id} in ${data.group}, ${arena.when(data.created_at)}: its context as recorded`;
      document.getElementById("layers").replaceChildren(...layers(data.report, {}));
      const decisions = data.report.decisions || [];
      document.getElementById("decisions").replaceChildren(...(decisions.length
        ? decisions.map((d) => el("li", {}, typeof d === "string" ? d : JSON.stringify(d)))
        : [el("li", {class: "hint"}, "Everything fit: nothing was cut.")]));
      document.querySelector("#recall tbody").replaceChildren(...recall(data.report));
      tools(data.tools);
      document.querySelectorAll("#result details").forEach((d) => { d.hidden = true; });
      document.getElementById("result").hidden = false;
    } catch (error) {
      arena.show(problem, error.message);
    }
  }

  form.addEventListener("submit", (event) => { event.preventDefault(); show(); });
  if (params.get("reply")) showReply(params.get("reply"));
  (async () => {
    try {
      const agents = (await arena.api("/api/agents")).agents;
      const select = document.getElementById("agent");
      agents.forEach((a) => select.append(el("option", {value: a.id, selected: a.id === params.get("agent")}, a.name)));
    } catch (error) {
      arena.show(problem, error.message);
    }
    if (params.get("group")) form.elements.group.value = params.get("group");
    if (params.get("message")) form.elements.message.value = params.get("message");
    if (params.get("group") && !params.get("reply")) show();
  })();
})();
