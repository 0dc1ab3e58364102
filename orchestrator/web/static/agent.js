/* An agent's page: its MEMORY.md growth (a chart of every version, failed attempts marked),
 * one version's text and diff, the current MEMORY.md with a hand edit, its daily logs (each
 * line linked to the message it came from) and its identity. */
"use strict";

(function () {
  const el = arena.el;
  const agent = document.getElementById("agent").dataset.agent;
  const base = "/api/agents/" + encodeURIComponent(agent);
  const problem = document.getElementById("agent-error");
  const SVG = "http://www.w3.org/2000/svg";
  let current = null; // the agent's data as loaded (its MEMORY.md version is the edit's base)

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    children.forEach((c) => node.append(c));
    return node;
  }

  /* ---------------------------------------------------------------- growth chart */

  function chart(growth) {
    const box = document.getElementById("growth-chart");
    const versions = growth.versions;
    const attempts = growth.attempts || [];
    const W = 760, H = 220, L = 48, R = 16, T = 14, B = 34;
    const times = versions.map((v) => Date.parse(v.at)).concat(attempts.map((a) => Date.parse(a.at)));
    if (!times.length) {
      box.replaceChildren(el("p", {class: "hint"}, "No version yet: MEMORY.md is written by the first heartbeat (or a hand edit)."));
      return;
    }
    const t0 = Math.min(...times), t1 = Math.max(...times);
    const span = t1 - t0 || 1;
    // The scale fits the versions; the budget line shows when it is within reach of them.
    const most = Math.max(...versions.map((v) => v.tokens), 1);
    const budget = growth.budget_tokens || 0;
    const top = budget && budget <= most * 2 ? Math.max(budget, most) * 1.1 : Math.ceil(most * 1.3);
    const x = (t) => L + (times.length === 1 ? (W - L - R) / 2 : ((t - t0) / span) * (W - L - R));
    const y = (tokens) => T + (1 - tokens / top) * (H - T - B);
    const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, class: "growth", role: "img",
      "aria-label": `MEMORY.md size over ${versions.length} versions`});
    root.append(svg("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis"}));
    root.append(svg("line", {x1: L, y1: T, x2: L, y2: H - B, class: "axis"}));
    if (budget && budget <= top) {
      root.append(svg("line", {x1: L, y1: y(budget), x2: W - R, y2: y(budget), class: "budget"}));
      root.append(svg("text", {x: W - R, y: y(budget) - 4, class: "label end"}, `budget ${budget}`));
    } else if (budget) {
      root.append(svg("text", {x: W - R, y: T + 8, class: "label end"}, `budget ${budget} tokens (above)`));
    }
    root.append(svg("text", {x: L - 6, y: T + 8, class: "label end"}, String(Math.round(top))));
    root.append(svg("text", {x: L - 6, y: H - B, class: "label end"}, "0"));
    root.append(svg("text", {x: L, y: H - 10, class: "label"}, arena.when(new Date(t0).toISOString())));
    if (times.length > 1) root.append(svg("text", {x: W - R, y: H - 10, class: "label end"}, arena.when(new Date(t1).toISOString())));
    if (versions.length > 1) {
      const points = versions.map((v) => `${x(Date.parse(v.at)).toFixed(1)},${y(v.tokens).toFixed(1)}`).join(" ");
      root.append(svg("polyline", {points, class: "line"}));
    }
    // Entries per version, on their own scale (right): squares joined by a dashed line.
    const entriesTop = Math.max(...versions.map((v) => v.entries), 1) * 1.3;
    const ye = (entries) => T + (1 - entries / entriesTop) * (H - T - B);
    root.append(svg("text", {x: W - R, y: H - B + 14, class: "label end"}, `entries (right scale, up to ${Math.round(entriesTop)})`));
    if (versions.length > 1) {
      const steps = versions.map((v) => `${x(Date.parse(v.at)).toFixed(1)},${ye(v.entries).toFixed(1)}`).join(" ");
      root.append(svg("polyline", {points: steps, class: "entries-line"}));
    }
    versions.forEach((v) => {
      const cx = x(Date.parse(v.at));
      root.append(svg("rect", {x: cx - 3, y: ye(v.entries) - 3, width: 6, height: 6, class: "entries"},
        svg("title", {}, `v${v.version}: ${v.entries} entries`)));
    });
    versions.forEach((v) => {
      const dot = svg("circle", {cx: x(Date.parse(v.at)), cy: y(v.tokens), r: 6, class: "point trigger-" + v.trigger.replace(/\W+/g, "-"),
        tabindex: 0, "data-version": v.version},
        svg("title", {}, `v${v.version} · ${arena.when(v.at)} · ${v.trigger} · ${v.tokens} tokens · ${v.entries} entries`));
      dot.addEventListener("click", () => showVersion(v.version));
      dot.addEventListener("keydown", (e) => { if (e.key === "Enter") showVersion(v.version); });
      root.append(dot);
    });
    attempts.forEach((a) => {
      const cx = x(Date.parse(a.at));
      root.append(svg("path", {d: `M${cx - 5},${H - B - 5} l10,10 m0,-10 l-10,10`, class: "failed"},
        svg("title", {}, `${arena.when(a.at)} · ${a.trigger} · ${a.status}: ${a.reason}`)));
    });
    box.replaceChildren(root);
  }

  function versionsTable(growth) {
    const body = document.querySelector("#versions tbody");
    const rows = growth.versions.slice().reverse().map((v) => {
      const link = el("a", {href: "#v" + v.version}, "v" + v.version);
      link.addEventListener("click", (e) => { e.preventDefault(); showVersion(v.version); });
      return el("tr", {}, el("td", {}, link), el("td", {}, arena.when(v.at)), el("td", {}, v.trigger),
        el("td", {class: "num"}, arena.number(v.tokens)), el("td", {class: "num"}, arena.number(v.entries)),
        el("td", {}, `+${v.lines_added} −${v.lines_removed}`));
    });
    (growth.attempts || []).slice().reverse().forEach((a) => rows.push(el("tr", {class: "failed-row"},
      el("td", {}, "—"), el("td", {}, arena.when(a.at)), el("td", {}, a.trigger),
      el("td", {colspan: 3, class: "error text"}, a.status + ": " + a.reason))));
    body.replaceChildren(...(rows.length ? rows : [el("tr", {class: "empty"}, el("td", {colspan: 6}, "No versions yet."))]));
  }

  async function showVersion(number) {
    try {
      const v = await arena.api(base + "/growth/" + number);
      document.getElementById("version-title").textContent = `Version ${v.version} · ${arena.when(v.at)} · ${v.trigger}`;
      document.getElementById("version-text").textContent = v.text;
      const diff = document.getElementById("version-diff");
      diff.replaceChildren(...v.diff.split("\n").map((line) => {
        const cls = line.startsWith("+") && !line.startsWith("+++") ? "add"
          : line.startsWith("-") && !line.startsWith("---") ? "del" : line.startsWith("@@") ? "hunk" : "";
        return el("span", {class: cls}, line + "\n");
      }));
      const box = document.getElementById("version");
      box.hidden = false;
      box.scrollIntoView({block: "nearest"});
    } catch (error) {
      arena.show(problem, error.message);
    }
  }

  /* ---------------------------------------------------------------- MEMORY.md and its edit */

  function showMemory(data) {
    const memory = data.memory_md;
    document.getElementById("memory-text").textContent = memory.text || "(empty)";
    document.getElementById("memory-tokens").textContent =
      `version ${memory.version} · ${memory.tokens} of ${memory.budget_tokens} tokens · ${memory.entries} entries`;
    const meter = document.getElementById("memory-meter");
    meter.style.width = Math.min(100, (100 * memory.tokens) / (memory.budget_tokens || 1)).toFixed(1) + "%";
  }

  const editForm = document.getElementById("edit-form");
  const editText = document.getElementById("edit-text");
  const editError = document.getElementById("edit-error");
  let editBase = 0;

  document.getElementById("edit").addEventListener("click", () => {
    editText.value = current.memory_md.text || "";
    editBase = current.memory_md.version;
    editForm.hidden = false;
    arena.show(editError, "");
    editText.focus();
  });
  document.getElementById("edit-cancel").addEventListener("click", () => { editForm.hidden = true; });
  editForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      await arena.api(base + "/memory-md", {method: "PUT", json: {text: editText.value, base_version: editBase}});
      editForm.hidden = true;
      await load();
    } catch (error) {
      const hint = error.status === 409 ? " Your text is still here: copy it, reload, and edit again." : "";
      arena.show(editError, error.message + hint);
    }
  });

  /* ---------------------------------------------------------------- daily logs */

  const daySelect = document.getElementById("log-day");
  async function showLog(day) {
    const query = day ? "?" + new URLSearchParams({date: day}) : "";
    try {
      const log = await arena.api(base + "/logs" + query);
      const days = log.days.slice().reverse();
      if (!days.includes(log.date)) days.unshift(log.date);
      daySelect.replaceChildren(...days.map((d) => el("option", {value: d, selected: d === log.date}, d)));
      const list = document.getElementById("log");
      list.replaceChildren(...log.lines.map((line) => {
        const item = el("li", {}, line.text);
        if (line.group) {
          const href = "/groups/" + encodeURIComponent(line.group) + (line.message_id ? "#m-" + encodeURIComponent(line.message_id) : "");
          item.append(" ", el("a", {href, class: "small"}, "in " + line.group));
        }
        return item;
      }));
      document.getElementById("log-empty").hidden = log.lines.length > 0;
    } catch (error) {
      arena.show(problem, error.message);
    }
  }
  daySelect.addEventListener("change", () => showLog(daySelect.value));

  /* ---------------------------------------------------------------- all of it */

  async function load() {
    try {
      current = await arena.api(base);
      const a = current.agent;
      document.getElementById("agent-name").textContent = `${a.name} (${a.id})`;
      document.getElementById("agent-name").style.setProperty("--agent", a.colour || "#666");
      document.getElementById("agent-about").textContent = [a.role, a.model, a.description].filter(Boolean).join(" · ");
      document.getElementById("claude-md").textContent = current.identity["CLAUDE.md"] || "(none)";
      document.getElementById("soul-md").textContent = current.identity["SOUL.md"] || "(none)";
      showMemory(current);
      document.getElementById("edit").disabled = false; // the edit's base version is known
      const growth = await arena.api(base + "/growth");
      chart(growth);
      versionsTable(growth);
      arena.show(problem, "");
    } catch (error) {
      arena.show(problem, error.message);
    }
  }

  load();
  showLog(null);
})();
