/* The memory browser: search memories as recall does (or list them by filter), see why each
 * is remembered (its citation, who wrote it, reinforcements, last use, history), and correct
 * it: edit (a new entry supersedes it), forget, restore, pin, unpin. */
"use strict";

(function () {
  const el = arena.el;
  const form = document.getElementById("filters");
  const body = document.querySelector("#memories tbody");
  const problem = document.getElementById("memory-error");
  const detail = document.getElementById("detail");
  const params = new URLSearchParams(window.location.search);
  for (const name of ["q", "group", "agent", "type", "status", "written_by"]) {
    const field = form.elements[name];
    if (field && params.get(name)) field.value = params.get(name);
  }

  function roomLink(group, messageId, label) {
    const href = "/groups/" + encodeURIComponent(group) + (messageId ? "#m-" + encodeURIComponent(messageId) : "");
    return el("a", {href}, label);
  }

  function actions(m) {
    const cell = el("td", {class: "actions"});
    const button = (label, handler, cls) => {
      const b = el("button", {type: "button", class: "small " + (cls || "")}, label);
      b.addEventListener("click", handler);
      cell.append(b, " ");
    };
    button("Why?", () => showDetail(m.id), "link");
    if (m.status === "active") {
      button("Edit", () => editRow(m));
      button(m.pinned ? "Unpin" : "Pin", () => act(m.id, m.pinned ? "unpin" : "pin"));
      button("Forget", () => act(m.id, "forget"));
    } else if (m.status === "archived") {
      button("Restore", () => act(m.id, "restore"));
    }
    return cell;
  }

  function row(m) {
    const labels = el("div", {class: "labels"}, el("span", {class: "tag"}, m.type));
    if (m.pinned) labels.append(" ", el("span", {class: "tag pinned"}, "pinned"));
    if (m.status !== "active") labels.append(" ", el("span", {class: "tag muted"}, m.status === "archived" ? "forgotten" : m.status));
    const where = el("td", {});
    if (m.scope === "session") where.append(roomLink(m.scope_id, m.source_message_id, m.scope_id));
    else where.append(m.scope + (m.scope_id ? " " + m.scope_id : ""));
    where.append(el("div", {class: "hint"}, [m.agent, m.written_by, arena.when(m.created_at)].filter(Boolean).join(" · ")));
    let turn = "";
    if (m.kept === true) turn = "recalled" + (typeof m.score === "number" ? " (score " + m.score.toFixed(2) + ")" : "");
    else if (m.kept === false && m.dropped) turn = "left out: " + m.dropped.reason + " (" + m.dropped.layer + ")";
    return el("tr", {id: "mem-" + m.id, class: m.kept === false ? "dropped" : ""},
      el("td", {class: "num"}, String(m.id)),
      el("td", {class: "text"}, labels, el("div", {class: "content"}, m.content),
        el("div", {class: "hint"}, "reinforced " + Math.max(0, (m.count || 1) - 1) + "×" +
          (m.last_used_at ? " · last used " + arena.when(m.last_used_at) : " · never used"))),
      where,
      el("td", {}, m.trust || (m.source_message_id ? "sourced" : "unsourced")),
      el("td", {class: "turn"}, turn),
      actions(m));
  }

  async function search() {
    const query = new URLSearchParams();
    for (const [name, value] of new FormData(form).entries()) if (String(value).trim()) query.set(name, String(value).trim());
    window.history.replaceState(null, "", "/memory?" + query);
    try {
      const data = await arena.api("/api/memories?" + query);
      const found = data.memories || [];
      body.replaceChildren(...(found.length ? found.map(row)
        : [el("tr", {class: "empty"}, el("td", {colspan: 6}, query.get("q") ? "Nothing recalled for that." : "No memories match."))]));
      arena.show(problem, "");
    } catch (error) {
      arena.show(problem, error.message);
    }
  }

  async function act(id, action) {
    try {
      await arena.api("/api/memories/" + id + "/" + action, {method: "POST"});
      await search();
      if (!detail.hidden) await showDetail(id);
    } catch (error) {
      arena.show(problem, error.message);
    }
  }

  function editRow(m) {
    const tr = document.getElementById("mem-" + m.id);
    const text = el("textarea", {rows: 3, "aria-label": "corrected memory"});
    text.value = m.content;
    const save = el("button", {type: "submit"}, "Save (supersedes it)");
    const cancel = el("button", {type: "button", class: "small link"}, "Cancel");
    const why = el("span", {class: "error", role: "alert", hidden: true});
    const editor = el("form", {class: "edit"}, text, el("div", {class: "post-row"}, save, cancel, why));
    const cell = el("td", {colspan: 6}, editor);
    const editing = el("tr", {class: "editing"}, cell);
    tr.after(editing);
    cancel.addEventListener("click", () => editing.remove());
    editor.addEventListener("submit", async (event) => {
      event.preventDefault();
      try {
        const done = await arena.api("/api/memories/" + m.id, {method: "PATCH", json: {content: text.value}});
        editing.remove();
        await search();
        await showDetail(done.new.id);
      } catch (error) {
        arena.show(why, error.message);
      }
    });
    text.focus();
  }

  async function showDetail(id) {
    try {
      const m = await arena.api("/api/memories/" + id);
      document.getElementById("detail-title").textContent = `Memory #${m.id}: why it is remembered`;
      const parts = [el("p", {class: "content"}, m.content),
        el("dl", {class: "facts"},
          el("dt", {}, "type, status"), el("dd", {}, m.type + ", " + (m.status === "archived" ? "forgotten" : m.status) + (m.pinned ? ", pinned" : "")),
          el("dt", {}, "written"), el("dd", {}, [m.written_by, m.agent, arena.when(m.created_at)].filter(Boolean).join(" · ")),
          el("dt", {}, "confidence"), el("dd", {}, String(m.confidence) + (m.verified ? " (verified)" : "")),
          el("dt", {}, "reinforced"), el("dd", {}, (m.reinforced || 0) + "×, last " + arena.when(m.last_seen_at)),
          el("dt", {}, "last used"), el("dd", {}, m.last_used_at ? arena.when(m.last_used_at) : "never"))];
      if (m.cited_message) {
        const c = m.cited_message;
        parts.push(el("h3", {}, "Cites"), el("blockquote", {class: "cited"},
          el("div", {class: "hint"}, c.sender + " · " + arena.when(c.created_at) + " · ", roomLink(c.group, c.id, "open in " + c.group)),
          el("div", {}, c.text)));
      } else {
        parts.push(el("p", {class: "hint"}, "It cites no message."));
      }
      const links = [];
      if (m.supersedes) links.push(el("a", {href: "#", "data-id": m.supersedes}, "replaces #" + m.supersedes));
      if (m.superseded_by) links.push(el("a", {href: "#", "data-id": m.superseded_by}, "replaced by #" + m.superseded_by));
      links.forEach((a) => a.addEventListener("click", (e) => { e.preventDefault(); showDetail(Number(a.dataset.id)); }));
      if (links.length) parts.push(el("p", {}, ...links.flatMap((a) => [a, " "])));
      parts.push(el("h3", {}, "Changes"));
      parts.push(m.history.length ? el("ul", {class: "log"}, ...m.history.map((h) =>
        el("li", {}, arena.when(h.at) + " " + h.action + " by " + h.by +
          (h.new_entry_id ? " → #" + h.new_entry_id : "") +
          (h.old_content && h.new_content ? ": “" + h.old_content + "” → “" + h.new_content + "”" : ""))))
        : el("p", {class: "hint"}, "No change since it was written."));
      document.getElementById("detail-body").replaceChildren(...parts);
      detail.hidden = false;
      detail.scrollIntoView({block: "nearest"});
    } catch (error) {
      arena.show(problem, error.message);
    }
  }

  form.addEventListener("submit", (event) => { event.preventDefault(); search(); });
  (async () => {
    try {
      const agents = (await arena.api("/api/agents")).agents;
      const select = document.getElementById("agent");
      agents.forEach((a) => select.append(el("option", {value: a.id}, a.name)));
      if (params.get("agent")) select.value = params.get("agent");
    } catch (error) { /* the filter stays "any agent" */ }
    search();
  })();
})();
