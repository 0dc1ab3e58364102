/* A run's request for the person's approval, as one card inside the run's card: what the agent
 * wants to do (the tool, the full command or path, where, what an edit would write), why (the
 * reason it is asked, and the agent's last words), its state and when it expires; while it is
 * pending, Approve once, Always: <the pattern> (when there is one) and Deny, with a note for
 * the agent; once decided, who decided, when, and the note.
 *
 * A request is known here by its id: every approval step of it (asked, then decided, from the
 * run or from `arena approve`) reads it again from the approvals API and updates its one card.
 * A pending card is drawn again only when what it shows changes, so a note being typed stays.
 * Text from the model is only ever put in the page as text (textContent). */
"use strict";

arena.approvals = (function () {
  // id -> {id, record, line: the step's line until the record comes, problem, busy, node,
  //        changed: what to call when its state changes (its run card's status)}
  const requests = new Map();

  function known(id) {
    let request = requests.get(id);
    if (!request) {
      request = {id, record: null, line: "", problem: "", busy: false, node: null, changed: null};
      requests.set(id, request);
    }
    return request;
  }

  function url(id, action) {
    return "/api/approvals/" + encodeURIComponent(id) + (action ? "/" + action : "");
  }

  /* What is asked, in full: the command, the path, or the tool's whole input. */
  function asked(record) {
    const input = record.input || {};
    if (record.kind === "cap") return record.reason;
    if (record.tool === "Bash" && typeof input.command === "string") return input.command;
    for (const key of ["file_path", "notebook_path", "path"]) {
      if (typeof input[key] === "string" && input[key]) return input[key];
    }
    return JSON.stringify(input, null, 2);
  }

  function decided(record) {
    const who = record.decided_by ? " by " + record.decided_by : "";
    const at = record.decided_at ? " at " + arena.when(record.decided_at) : "";
    return record.state + who + at;
  }

  function buttons(request) {
    const record = request.record;
    const note = arena.el("input", {type: "text", class: "approval-note", maxlength: "2000",
      placeholder: "a note for the agent (optional)", "aria-label": "note for the agent",
      disabled: request.busy});
    const button = (label, cls, action, body) => {
      const node = arena.el("button", {type: "button", class: "small " + cls, disabled: request.busy}, label);
      node.addEventListener("click", () => decide(request.id, action, Object.assign(body, {note: note.value.trim() || null})));
      return node;
    };
    const row = [button("Approve once", "approve-once", "approve", {always: false})];
    if (record.pattern) row.push(button("Always: " + record.pattern, "approve-always", "approve", {always: true}));
    row.push(button("Deny", "deny", "deny", {}));
    return arena.el("div", {class: "approval-actions"}, note, ...row);
  }

  function build(request) {
    const record = request.record;
    if (!record) {
      return arena.el("div", {class: "approval-card", dataset: {approval: request.id}},
        arena.el("div", {class: "approval-head"}, request.line || "approval " + request.id),
        request.problem ? arena.el("div", {class: "error approval-problem", role: "alert"}, request.problem) : null);
    }
    const state = arena.el("span", {class: "approval-state state-" + record.state, role: "status"}, record.state);
    const head = arena.el("div", {class: "approval-head"},
      arena.el("span", {class: "approval-title"}, record.agent + " asks to use " + record.tool), state);
    if (record.state === "pending") {
      head.append(arena.el("span", {class: "approval-expiry"}, "expires " + arena.when(record.expires_at)));
    }
    const node = arena.el("div", {class: "approval-card", dataset: {approval: record.id, state: record.state}}, head,
      arena.el("pre", {class: "approval-what"}, asked(record)),
      arena.el("div", {class: "approval-cwd"}, "in " + record.cwd));
    if (record.preview) node.append(arena.el("pre", {class: "approval-preview"}, record.preview));
    node.append(arena.el("div", {class: "approval-reason"}, "asked because it " + record.reason));
    if (record.why) node.append(arena.el("blockquote", {class: "approval-why"}, record.why));
    if (record.state === "pending") {
      node.append(buttons(request));
    } else {
      node.append(arena.el("div", {class: "approval-decided"}, decided(record)));
      if (record.note) node.append(arena.el("div", {class: "approval-note-shown"}, "note: " + record.note));
    }
    if (request.problem) node.append(arena.el("div", {class: "error approval-problem", role: "alert"}, request.problem));
    return node;
  }

  /* Draw the card again when what it shows has changed (a pending one's note field stays). */
  function draw(request) {
    const record = request.record;
    const shown = JSON.stringify([record, request.problem, request.busy, request.line]);
    if (request.node && request.shown === shown) return;
    const before = request.node && request.node.dataset.state;
    request.shown = shown;
    const fresh = build(request);
    if (request.node) request.node.replaceWith(fresh);
    request.node = fresh;
    if (record && record.state !== before && request.changed) request.changed();
  }

  async function load(id) {
    const request = known(id);
    try {
      request.record = await arena.api(url(id));
      request.problem = "";
    } catch (error) {
      request.problem = error.message;
    }
    draw(request);
  }

  async function decide(id, action, body) {
    const request = known(id);
    request.busy = true;
    request.problem = "";
    draw(request);
    try {
      const done = await arena.api(url(id, action), {json: body});
      request.record = done.approval;
    } catch (error) {
      request.problem = error.message;  // decided already (409): shown with the first decision
      if (error.status === 409) await load(id);
    }
    request.busy = false;
    draw(request);
  }

  return {
    /* An approval step of request `step.approval` (asked, or decided): its card, read (again)
     * from the API; `changed` is called when its state changes. */
    seen(step, changed) {
      const request = known(step.approval);
      request.changed = changed;
      if (!request.record && step.line) request.line = step.line;
      if (!request.node) draw(request);
      load(step.approval);
      return request.node;
    },
    /* The card of a request seen already. */
    node(id) {
      const request = known(id);
      if (!request.node) draw(request);
      return request.node;
    },
    /* Whether a request still waits for a decision (as last read). */
    pending(id) {
      const request = requests.get(id);
      return Boolean(request && request.record && request.record.state === "pending");
    },
  };
})();
