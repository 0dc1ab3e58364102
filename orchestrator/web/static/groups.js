/* The groups page: every group with its message count and last activity. */
"use strict";

(function () {
  const body = document.querySelector("#groups tbody");
  const problem = document.getElementById("groups-error");
  const form = document.getElementById("open-group");
  const name = document.getElementById("group-name");

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const group = name.value.trim();
    if (group) window.location.assign("/groups/" + encodeURIComponent(group));
  });

  async function load() {
    try {
      const data = await arena.api("/api/groups");
      body.replaceChildren();
      if (!data.groups.length) {
        body.append(arena.el("tr", {class: "empty"}, arena.el("td", {colspan: 4}, "No groups yet.")));
      }
      for (const group of data.groups) {
        const link = arena.el("a", {href: "/groups/" + encodeURIComponent(group.group)}, group.group);
        body.append(arena.el("tr", {},
          arena.el("td", {}, link),
          arena.el("td", {class: "num"}, arena.number(group.messages)),
          arena.el("td", {}, arena.when(group.last_at)),
          arena.el("td", {}, group.last_sender || "")));
      }
      arena.show(problem, "");
    } catch (error) {
      arena.show(problem, error.message);
    }
  }

  load();
  window.setInterval(load, 10000);
})();
