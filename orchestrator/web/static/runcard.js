/* A run's card in the room: the agent, why the turn became a run, a live status, the run's
 * steps as they arrive (the room's `step` events), a Cancel button, and, once the run's reply
 * has come, how it ended: the files it changed, the diff stat, the commit or the branch it was
 * kept on, its turns, time and cost. A step of kind `approval` is not a line: its request is
 * shown as one card of its own in the run's card (approvalcard.js), whatever steps name it.
 *
 * What is known of a run is kept here, by run id, apart from the page: a step may come before
 * its card is shown, and a card is drawn again when its message is. A run that ended before
 * the page was opened gets its steps from the runs API. Only text is put in the
 * page (textContent), never markup made of data. */
"use strict";

arena.runs = (function () {
  // run id -> {card: its notice's run, steps: Map(n -> step), end: its reply's run,
  //            cancelling, problem: why a cancel failed, node: the card drawn,
  //            approvals: its requests' ids in the order asked, box: where their cards are}
  const runs = new Map();

  function known(id) {
    let run = runs.get(id);
    if (!run) {
      run = {steps: new Map(), end: null, cancelling: false, problem: "", node: null, card: null,
        approvals: [], box: null};
      runs.set(id, run);
    }
    return run;
  }

  function status(run) {
    if (run.end) return run.end.status || "ended";
    if (run.cancelling) return "cancelling";
    if (run.approvals.some(arena.approvals.pending)) return "waiting for approval";
    if (run.steps.size) return "running";
    return (run.card && run.card.status) || "queued";
  }

  function stepLine(step) {
    const kinds = "step " + (step.kind || "text") + (step.is_error ? " error" : "");
    return arena.el("li", {class: kinds, dataset: {n: String(step.n)}}, step.line || "");
  }

  function seconds(ms) {
    return (ms / 1000).toFixed(1) + " s";
  }

  /* How the run ended, from its reply's `run`: files, stat, commit or branch, turns, time, cost. */
  function ending(end) {
    const files = end.files || [];
    const changed = files.length === 1 ? "1 file changed" : files.length + " files changed";
    const facts = [files.length ? changed : "no file changed"];
    if (end.commit) {
      const where = end.merged ? "merged" : (end.branch ? "kept on branch " + end.branch : "not merged");
      facts.push("commit " + end.commit.slice(0, 7) + " (" + where + ")");
    } else if (end.branch) {
      facts.push("kept on branch " + end.branch);
    }
    if (end.reason) facts.push(end.reason);
    const cost = typeof end.cost_usd === "number" ? " · $" + end.cost_usd.toFixed(4) : "";
    const spent = (end.turns || 0) + " turns · " + seconds(end.duration_ms || 0) + cost;
    const parts = [arena.el("div", {class: "run-facts"}, facts.join(" · ")),
      arena.el("div", {class: "run-spent"}, spent)];
    if (files.length) {
      parts.push(arena.el("ul", {class: "run-files"}, ...files.map((f) => arena.el("li", {}, f))));
    }
    if (end.stat) parts.push(arena.el("pre", {class: "run-stat"}, end.stat));
    return arena.el("div", {class: "run-end"}, ...parts);
  }

  /* The steps of a run that ended before the page was opened, from the runs API (once). */
  async function fetchSteps(id) {
    const run = known(id);
    if (run.fetched || run.steps.size) return;
    run.fetched = true;
    try {
      const found = await arena.api("/api/runs/" + encodeURIComponent(id));
      for (const step of found.steps || []) {
        if (step.kind === "approval" && step.approval) approval(id, step);
        else if (!run.steps.has(step.n)) run.steps.set(step.n, step);
      }
    } catch (error) {
      return;  // the card still shows how the run ended
    }
    draw(id);
  }

  async function cancel(id) {
    const run = known(id);
    run.problem = "";
    try {
      await arena.api("/api/runs/" + encodeURIComponent(id) + "/cancel", {method: "POST"});
      run.cancelling = true;
    } catch (error) {
      run.problem = error.message;
    }
    draw(id);
  }

  /* A step about request `step.approval`: its one card in the run's card, made or updated. */
  function approval(id, step) {
    const run = known(id);
    arena.approvals.seen(step, () => draw(id));
    if (!run.approvals.includes(step.approval)) {
      run.approvals.push(step.approval);
      draw(id);
    }
  }

  /* The requests' cards, in one box kept for the run's life (a note being typed stays). */
  function approvalBox(run) {
    if (!run.box) run.box = arena.el("div", {class: "run-approvals"});
    for (const approvalId of run.approvals) {
      const node = arena.approvals.node(approvalId);
      if (node.parentNode !== run.box) run.box.append(node);
    }
    return run.box;
  }

  /* The card of run `id`, as it stands: what comes before its requests' box, and after. */
  function parts(id) {
    const run = known(id);
    const card = run.card || {};
    const now = status(run);
    const agent = card.agent;
    const who = arena.el("span", {class: "who" + (agent ? " agent" : "")}, agent ? agent.name : "run");
    if (agent && agent.colour) who.style.setProperty("--agent", agent.colour);
    const head = arena.el("div", {class: "run-head"}, who,
      arena.el("span", {class: "run-status status-" + now.replace(/[^a-z]+/g, "-"), role: "status"},
        now.replace(/_/g, " ")));
    if (!run.end) {
      const button = arena.el("button", {type: "button", class: "small run-cancel", disabled: run.cancelling},
        "Cancel");
      button.addEventListener("click", () => { button.disabled = true; cancel(id); });
      head.append(button);
    }
    const before = [head];
    if (card.why) before.push(arena.el("div", {class: "why"}, "why: " + card.why));
    const steps = [...run.steps.values()].sort((a, b) => a.n - b.n).map(stepLine);
    before.push(arena.el("ol", {class: "run-steps", "aria-label": "the run's steps"}, ...steps));
    const after = [];
    if (run.problem) after.push(arena.el("div", {class: "error run-problem", role: "alert"}, run.problem));
    if (run.end) after.push(ending(run.end));
    return {before, after};
  }

  function build(id) {
    const {before, after} = parts(id);
    return arena.el("div", {class: "card run-card", dataset: {run: id}}, ...before,
      approvalBox(known(id)), ...after);
  }

  function draw(id) {
    const run = known(id);
    if (!run.node || !run.node.isConnected) return;
    const list = run.node.querySelector(".run-steps");
    const atEnd = list && list.scrollHeight - list.scrollTop - list.clientHeight < 24;
    // Everything but the requests' box is drawn again; the box stays where it is.
    const box = approvalBox(run);
    const {before, after} = parts(id);
    for (const child of [...run.node.childNodes]) if (child !== box) child.remove();
    if (box.parentNode !== run.node) run.node.append(box);
    box.before(...before);
    box.after(...after);
    const newList = run.node.querySelector(".run-steps");
    if (newList && atEnd) newList.scrollTop = newList.scrollHeight;
  }

  return {
    /* The card for a run's notice (`msg.run`): drawn now, kept up to date. */
    card(msg) {
      const run = known(msg.run.id);
      run.card = msg.run;
      run.node = build(msg.run.id);
      return run.node;
    },
    /* A step from the room's events (one seen already is skipped: `run` and `n` name it). */
    step(step) {
      if (!step || !step.run) return;
      if (step.kind === "approval" && step.approval) {
        approval(step.run, step);
        return;
      }
      const run = known(step.run);
      if (run.steps.has(step.n)) return;
      run.steps.set(step.n, step);
      draw(step.run);
    },
    /* The run's reply came (`msg.run`: how it ended). */
    ended(end) {
      const run = known(end.id);
      run.end = end;
      run.cancelling = false;
      draw(end.id);
      fetchSteps(end.id);
    },
  };
})();
