/* The room: a group's messages, live (server-sent events), with why each agent answered,
 * what it wrote to memory and what the call cost; runs' cards with their steps (runcard.js);
 * and the post box. */
"use strict";

(function () {
  const room = document.getElementById("room");
  const group = room.dataset.group;
  const base = "/api/groups/" + encodeURIComponent(group);
  const list = document.getElementById("list");
  const scroller = document.getElementById("messages");
  const older = document.getElementById("older");
  const empty = document.getElementById("empty");
  const live = document.getElementById("live");
  const form = document.getElementById("post");
  const text = document.getElementById("text");
  const sender = document.getElementById("sender");
  const send = document.getElementById("send");
  const postError = document.getElementById("post-error");
  const mentions = document.getElementById("mentions");

  const shown = new Map(); // message id -> <li>
  let before = null; // cursor of the next older page
  let agents = [];
  let loaded = false;

  const LAYERS = ["identity", "summary", "memory_md", "logs", "recall", "history", "overhead"];

  /* ------------------------------------------------------------------ one message */

  function agentChip(msg) {
    const agent = msg.agent;
    const chip = arena.el("span", {class: "who"}, agent ? agent.name : msg.sender);
    if (agent && agent.colour) chip.style.setProperty("--agent", agent.colour);
    if (agent) chip.classList.add("agent");
    const parts = [chip];
    if (agent && agent.role) parts.push(arena.el("span", {class: "role"}, agent.role));
    return parts;
  }

  function whyLine(msg) {
    if (!msg.why) return null;
    return arena.el("div", {class: "why", title: "why this agent answered"}, "why: " + msg.why.text);
  }

  function memoryLines(msg) {
    if (!msg.memory || !msg.memory.length) return null;
    const items = msg.memory.map((m) => arena.el("li", {class: "mem " + m.outcome},
      arena.el("span", {class: "outcome"}, m.outcome),
      " ", m.type ? "[" + m.type + "] " : "", m.text || "",
      m.reason ? arena.el("span", {class: "reason"}, " (" + m.reason + ")") : null));
    return arena.el("ul", {class: "memory", title: "what this reply wrote to memory"}, ...items);
  }

  function toolLines(msg) {
    if (!msg.tools || !msg.tools.length) return null;
    const items = msg.tools.map((t) => arena.el("li", {class: "tool" + (t.is_error ? " error" : "")}, t.line));
    return arena.el("ul", {class: "tools", title: "the memory tools this reply called"}, ...items);
  }

  function usageLine(msg) {
    const u = msg.usage;
    if (!u) return null;
    const bits = [arena.number(u.input) + " in", arena.number(u.output) + " out"];
    if (typeof u.cache_read_share === "number") bits.push(Math.round(u.cache_read_share * 100) + "% cached");
    if (typeof u.latency_ms === "number") bits.push((u.latency_ms / 1000).toFixed(1) + " s");
    if (u.model) bits.push(u.model);
    if (u.calls > 1) bits.push(u.calls + " model calls");
    return arena.el("span", {class: "usage"}, bits.join(" · "));
  }

  function contextBar(context) {
    const total = context.total || LAYERS.reduce((s, k) => s + (context.layers[k] || 0), 0) || 1;
    const bar = arena.el("div", {class: "bar", role: "img", "aria-label": "context tokens by layer"});
    const legend = arena.el("ul", {class: "legend"});
    const names = Object.keys(context.layers).sort((a, b) => LAYERS.indexOf(a) - LAYERS.indexOf(b));
    names.forEach((name) => {
      const tokens = context.layers[name] || 0;
      if (!tokens) return;
      const part = arena.el("span", {class: "seg layer-" + name, title: name + ": " + tokens + " tokens"});
      part.style.width = (100 * tokens / total).toFixed(2) + "%";
      bar.append(part);
      legend.append(arena.el("li", {}, arena.el("span", {class: "swatch layer-" + name}), name + " " + arena.number(tokens)));
    });
    return arena.el("div", {class: "context"}, bar, legend,
      arena.el("div", {class: "hint"}, arena.number(context.total) + " tokens in all · ",
        arena.el("a", {href: "/context?reply=" + encodeURIComponent(context.id || "")}, "the whole report")));
  }

  function render(msg) {
    const li = arena.el("li", {class: "msg " + msg.kind, id: "m-" + msg.id, dataset: {id: msg.id, seq: msg.seq ?? ""}});
    const head = arena.el("div", {class: "head"}, ...agentChip(msg),
      arena.el("time", {datetime: msg.created_at || ""}, arena.when(msg.created_at)));
    if (msg.hop > 1) head.append(arena.el("span", {class: "hop"}, "hop " + msg.hop));
    if (msg.kind === "notice") head.append(arena.el("span", {class: "badge"}, msg.notice || "notice"));
    li.append(head);
    const body = arena.el("div", {class: "body"});
    if (typeof msg.html === "string") body.innerHTML = msg.html; // rendered and escaped by the server
    else body.textContent = msg.text;
    li.append(body);
    if (msg.run && msg.notice === "run") li.append(arena.runs.card(msg));
    else if (msg.run) arena.runs.ended(msg.run); // a run's reply: its card shows how it ended
    const foot = arena.el("div", {class: "foot"});
    const why = whyLine(msg);
    if (why) foot.append(why);
    const tools = toolLines(msg);
    if (tools) foot.append(tools);
    const memory = memoryLines(msg);
    if (memory) foot.append(memory);
    const usage = usageLine(msg);
    if (usage || msg.context) {
      const meta = arena.el("div", {class: "meta"});
      if (usage) meta.append(usage);
      if (msg.context && msg.context.layers) {
        const button = arena.el("button", {type: "button", class: "small link"}, "context cost");
        let panel = null;
        button.addEventListener("click", () => {
          if (panel) { panel.remove(); panel = null; return; }
          panel = contextBar(Object.assign({id: msg.id}, msg.context));
          foot.append(panel);
        });
        meta.append(" ", button);
      }
      foot.append(meta);
    }
    if (foot.childNodes.length) li.append(foot);
    return li;
  }

  /* ------------------------------------------------------------------ the list */

  function nearBottom() {
    return scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 80;
  }

  function place(li, msg) {
    const seq = typeof msg.seq === "number" ? msg.seq : null;
    if (seq !== null) {
      for (const other of list.children) {
        const otherSeq = other.dataset.seq === "" ? null : Number(other.dataset.seq);
        if (otherSeq !== null && otherSeq > seq) { list.insertBefore(li, other); return; }
      }
    }
    list.append(li);
  }

  function add(msg) {
    const stick = nearBottom();
    const li = render(msg);
    const old = shown.get(msg.id);
    if (old) {
      if (old.classList.contains("waiting")) li.classList.add("waiting");
      old.replaceWith(li);
    } else {
      place(li, msg);
    }
    shown.set(msg.id, li);
    empty.hidden = true;
    if (stick) scroller.scrollTop = scroller.scrollHeight;
  }

  async function loadPage(cursor) {
    const query = new URLSearchParams({limit: "50"});
    if (cursor !== null) query.set("before", String(cursor));
    try {
      const data = await arena.api(base + "/messages?" + query);
      data.messages.forEach((m) => { if (!shown.has(m.id) || shown.get(m.id).classList.contains("pending")) add(m); });
      if (cursor === null && !loaded) before = data.before;
      if (cursor !== null) before = data.before;
      older.hidden = before === null || before === undefined;
    } catch (error) {
      if (error.status === 404) {
        older.hidden = true;
      } else {
        arena.show(postError, error.message);
      }
    }
    loaded = true;
    empty.hidden = list.children.length > 0;
  }

  older.addEventListener("click", async () => {
    const top = scroller.scrollHeight - scroller.scrollTop;
    await loadPage(before);
    scroller.scrollTop = scroller.scrollHeight - top;
  });

  /* ------------------------------------------------------------------ live */

  let refresh = null;
  function refreshSoon() {
    // A reply to a message this page has not seen (someone else posted it): read the newest page.
    if (refresh) return;
    refresh = window.setTimeout(async () => { refresh = null; await loadPage(null); }, 150);
  }

  function connect() {
    const events = new EventSource(base + "/events");
    events.addEventListener("open", () => {
      live.textContent = "live";
      live.className = "live on";
      // Read the newest page again once subscribed: nothing said in between is missed (the
      // ids keep a message from showing twice).
      refreshSoon();
    });
    events.addEventListener("error", () => {
      live.textContent = "reconnecting…";
      live.className = "live off";
    });
    const onMessage = (event) => {
      const msg = JSON.parse(event.data);
      add(msg);
      if (msg.in_reply_to && !shown.has(msg.in_reply_to)) refreshSoon();
    };
    events.addEventListener("reply", onMessage);
    events.addEventListener("notice", onMessage);
    events.addEventListener("step", (event) => arena.runs.step(JSON.parse(event.data)));
    events.addEventListener("done", (event) => {
      const done = JSON.parse(event.data);
      const li = shown.get(done.in_reply_to);
      if (li) li.classList.remove("waiting");
      if (!li || li.classList.contains("pending")) refreshSoon(); // the stored message, rendered
    });
  }

  /* ------------------------------------------------------------------ posting */

  sender.value = window.localStorage.getItem("arena.sender") || sender.value;

  async function post() {
    const message = text.value;
    if (!message.trim()) return;
    send.disabled = true;
    arena.show(postError, "");
    try {
      const from = sender.value.trim();
      window.localStorage.setItem("arena.sender", from);
      const data = await arena.api(base + "/messages", {json: {text: message, sender: from}});
      text.value = "";
      if (!shown.has(data.id)) {
        add({id: data.id, seq: null, kind: "human", sender: from, text: message, created_at: new Date().toISOString(), hop: 0});
        shown.get(data.id).classList.add("pending", "waiting");
      }
    } catch (error) {
      arena.show(postError, error.message);
    } finally {
      send.disabled = false;
      text.focus();
    }
  }

  form.addEventListener("submit", (event) => { event.preventDefault(); post(); });

  /* ------------------------------------------------------------------ @ completion */

  let choices = [];
  let chosen = 0;

  function mentionAtCaret() {
    const upto = text.value.slice(0, text.selectionStart);
    const match = /(^|\s)@([\w-]*)$/.exec(upto);
    return match ? {prefix: match[2], start: upto.length - match[2].length - 1} : null;
  }

  function closeMentions() {
    mentions.hidden = true;
    choices = [];
  }

  function showMentions() {
    const at = mentionAtCaret();
    if (!at) { closeMentions(); return; }
    const prefix = at.prefix.toLowerCase();
    choices = agents.filter((a) => a.id.toLowerCase().startsWith(prefix) || (a.name || "").toLowerCase().startsWith(prefix));
    if (!choices.length) { closeMentions(); return; }
    chosen = Math.min(chosen, choices.length - 1);
    mentions.replaceChildren(...choices.map((a, i) => {
      const item = arena.el("li", {role: "option", class: i === chosen ? "chosen" : "", dataset: {id: a.id}},
        arena.el("span", {class: "who agent"}, "@" + a.id), " ", arena.el("span", {class: "role"}, a.role || ""));
      item.style.setProperty("--agent", a.colour || "#666");
      item.addEventListener("mousedown", (event) => { event.preventDefault(); pick(i); });
      return item;
    }));
    mentions.hidden = false;
  }

  function pick(index) {
    const at = mentionAtCaret();
    const agent = choices[index];
    if (!at || !agent) return;
    const rest = text.value.slice(text.selectionStart);
    const head = text.value.slice(0, at.start) + "@" + agent.id + " ";
    text.value = head + rest;
    text.selectionStart = text.selectionEnd = head.length;
    closeMentions();
    text.focus();
  }

  text.addEventListener("input", () => { chosen = 0; showMentions(); });
  text.addEventListener("blur", () => window.setTimeout(closeMentions, 100));
  text.addEventListener("keydown", (event) => {
    if (!mentions.hidden && choices.length) {
      if (event.key === "ArrowDown" || event.key === "ArrowUp") {
        event.preventDefault();
        chosen = (chosen + (event.key === "ArrowDown" ? 1 : choices.length - 1)) % choices.length;
        showMentions();
        return;
      }
      if (event.key === "Enter" || event.key === "Tab") { event.preventDefault(); pick(chosen); return; }
      if (event.key === "Escape") { closeMentions(); return; }
    }
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      post();
    }
  });

  async function loadAgents() {
    try {
      agents = (await arena.api("/api/agents")).agents;
    } catch (error) {
      agents = [];
    }
    if (document.activeElement === text) showMentions(); // an @ typed while they loaded
  }

  /* A link to one message (#m-ID, from a memory's citation or a daily log): its page is read,
   * older ones too when needed, and the message is scrolled to and marked. */
  async function showTarget() {
    const id = decodeURIComponent(window.location.hash.replace(/^#m-/, ""));
    if (!id || id === window.location.hash) return;
    for (let pages = 0; !shown.has(id) && before !== null && before !== undefined && pages < 40; pages++) {
      await loadPage(before);
    }
    const li = shown.get(id);
    if (li) {
      li.classList.add("target");
      li.scrollIntoView({block: "center"});
    }
  }

  /* The group's rolling summary: its text, its versions (each with its diff) and a button to
   * update it now (a background job, as `arena summarize`). */
  const summary = document.getElementById("summary");
  const summaryNote = document.getElementById("summary-note");

  async function loadSummary(version) {
    try {
      const data = await arena.api("/api/groups/" + encodeURIComponent(group) + "/summary" + (version ? "?version=" + version : ""));
      document.getElementById("summary-text").textContent = data.text || "(no summary yet)";
      const list = document.getElementById("summary-versions");
      list.replaceChildren(...data.versions.slice().reverse().map((v) => {
        const link = arena.el("a", {href: "#"}, "v" + v.version);
        link.addEventListener("click", (event) => { event.preventDefault(); loadSummary(v.version); });
        return arena.el("li", {}, link, " " + arena.when(v.created_at || v.at) + " · " + (v.trigger || "") + " · " + (v.tokens ?? "") + " tokens");
      }));
      const diff = document.getElementById("summary-diff");
      if (data.version) {
        diff.textContent = data.version.diff || "(no change)";
        diff.hidden = false;
      }
      return data.versions.length;
    } catch (error) {
      summaryNote.textContent = error.message;
      return null;
    }
  }

  summary.addEventListener("toggle", () => { if (summary.open) loadSummary(null); });
  document.getElementById("summarize").addEventListener("click", async () => {
    try {
      summaryNote.textContent = "summarizing…";
      const job = await arena.api("/api/groups/" + encodeURIComponent(group) + "/summarize", {method: "POST"});
      summaryNote.textContent = job.detail;
      await loadSummary(null);
    } catch (error) {
      summaryNote.textContent = error.message;
    }
  });

  loadAgents();
  loadPage(null).then(showTarget);
  connect();
})();
