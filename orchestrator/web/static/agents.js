/* The agents page: the team, each agent linking to its page. */
"use strict";

(async function () {
  const body = document.querySelector("#agents tbody");
  try {
    const data = await arena.api("/api/agents");
    body.replaceChildren(...data.agents.map((a) => {
      const name = arena.el("a", {href: "/agents/" + encodeURIComponent(a.id), class: "who agent"}, a.name);
      name.style.setProperty("--agent", a.colour || "#666");
      return arena.el("tr", {}, arena.el("td", {}, name, a.default ? " (default)" : ""),
        arena.el("td", {}, a.role || ""), arena.el("td", {}, a.description || ""));
    }));
  } catch (error) {
    arena.show(document.getElementById("agents-error"), error.message);
  }
})();
