/* An agent's allow-list on its page: each pattern it uses without asking (added by Always on
 * a request's card), who added it, when and from which request, with a Remove button. Only
 * text is put in the page (textContent). */
"use strict";

(function () {
  const el = arena.el;
  const agent = document.getElementById("agent").dataset.agent;
  const body = document.querySelector("#allow-list tbody");
  const empty = document.getElementById("allow-empty");
  const problem = document.getElementById("allow-error");

  async function remove(rule, button) {
    button.disabled = true;
    arena.show(problem, "");
    try {
      await arena.api("/api/allow", {method: "DELETE", json: {agent: rule.agent, pattern: rule.pattern}});
    } catch (error) {
      arena.show(problem, error.message);
    }
    await load();
  }

  function row(rule) {
    const button = el("button", {type: "button", class: "small allow-remove"}, "Remove");
    button.addEventListener("click", () => remove(rule, button));
    return el("tr", {dataset: {pattern: rule.pattern}},
      el("td", {}, el("code", {class: "allow-pattern"}, rule.pattern)),
      el("td", {}, rule.added_by),
      el("td", {}, arena.when(rule.added_at)),
      el("td", {}, rule.approval || "–"),
      el("td", {}, button));
  }

  async function load() {
    try {
      const found = await arena.api("/api/allow?agent=" + encodeURIComponent(agent));
      body.replaceChildren(...found.rules.map(row));
      empty.hidden = found.rules.length > 0;
    } catch (error) {
      arena.show(problem, error.message);
    }
  }

  load();
})();
