/* The knowledge page: the sources (who reads them, trust, counts, last check, problem), a
 * source's chunks on click, search as a turn would be given passages, uploading documents as a
 * source of their own, the lorebook entries (added, edited and removed here), and a locator opened to
 * the file's lines now, numbered, with whether they are still what was cited. Every text from
 * the server is put in the page as text. */
"use strict";

(function () {
  const el = arena.el;
  const params = new URLSearchParams(window.location.search);
  const problem = document.getElementById("knowledge-error");
  const note = document.getElementById("knowledge-note");
  const sourcesBody = document.querySelector("#sources tbody");
  const upload = document.getElementById("upload");
  const owner = document.getElementById("upload-owner");
  const uploadGroup = document.getElementById("upload-group");
  const uploadAgent = document.getElementById("upload-agent");
  const uploadError = document.getElementById("upload-error");
  const loreBody = document.querySelector("#lore-entries tbody");
  const loreForm = document.getElementById("lore-form");
  const loreOwner = document.getElementById("lore-owner");
  const loreGroup = document.getElementById("lore-group");
  const loreAgent = document.getElementById("lore-agent");
  const loreError = document.getElementById("lore-error");
  const loreTitle = document.getElementById("lore-form-title");
  const loreSubmit = document.getElementById("lore-submit");
  const loreCancel = document.getElementById("lore-cancel");
  const loreField = (name) => document.getElementById("lore-" + name);
  let editing = null; /* the entry the lore form is editing, or null when it adds one */
  const searchForm = document.getElementById("search");
  const locateForm = document.getElementById("locate-form");
  const STATES = {
    current: "as cited",
    moved: "moved: the cited text is at these lines now",
    changed: "changed since it was cited: these are the lines now",
    unversioned: "no digest given: the lines now",
  };

  function trustTag(trust) {
    return el("span", {class: "tag " + (trust === "external" ? "external" : "")}, trust);
  }

  /* A locator as a link that opens it below (and in the address, to share). */
  function locatorLink(locator) {
    const a = el("a", {href: "/knowledge?locator=" + encodeURIComponent(locator), class: "locator"}, locator);
    a.addEventListener("click", (event) => { event.preventDefault(); openLocator(locator); });
    return a;
  }

  function forgetButton(s) {
    const b = el("button", {type: "button", class: "small"}, "Forget");
    b.addEventListener("click", async () => {
      if (b.dataset.armed !== "yes") {
        b.dataset.armed = "yes";
        b.textContent = "Forget " + s.name + "?";
        return;
      }
      try {
        const done = await arena.api("/api/knowledge/sources/" + encodeURIComponent(s.name), {method: "DELETE"});
        arena.show(note, done.note);
        arena.show(problem, "");
        await loadSources();
      } catch (error) {
        arena.show(problem, error.message);
      }
    });
    return b;
  }

  function sourceRow(s) {
    const open = el("button", {type: "button", class: "small link"}, s.name);
    open.addEventListener("click", () => showChunks(s.name));
    return el("tr", {dataset: {source: s.name}},
      el("td", {class: "name"}, open, el("div", {class: "hint"}, s.root)),
      el("td", {}, s.owner),
      el("td", {}, trustTag(s.trust)),
      el("td", {}, s.kind),
      el("td", {class: "num"}, arena.number(s.files)),
      el("td", {class: "num"}, arena.number(s.chunks),
        s.embedded !== null && s.embedded !== undefined && s.embedded < s.chunks
          ? el("div", {class: "hint", title: "chunks found by meaning too; a running daemon embeds the rest"},
            arena.number(s.embedded) + " by meaning") : null),
      el("td", {}, s.checked_at ? arena.when(s.checked_at) : "never"),
      el("td", {class: "error"}, s.problem || ""),
      el("td", {class: "actions"}, forgetButton(s)));
  }

  async function loadSources() {
    try {
      const data = await arena.api("/api/knowledge/sources");
      sourcesBody.replaceChildren(...(data.sources.length ? data.sources.map(sourceRow)
        : [el("tr", {class: "empty"}, el("td", {colspan: 9}, "No knowledge sources yet: upload documents below, or `arena knowledge add`."))]));
    } catch (error) {
      arena.show(problem, error.message);
    }
  }

  async function showChunks(name) {
    try {
      const data = await arena.api("/api/knowledge/sources/" + encodeURIComponent(name) + "/chunks?limit=500");
      document.getElementById("chunks-title").textContent = `Chunks of ${name}` +
        (data.more ? ` (the first ${data.chunks.length})` : ` (${data.chunks.length})`);
      document.querySelector("#chunk-rows tbody").replaceChildren(...(data.chunks.length ? data.chunks.map((c) => el("tr", {},
        el("td", {class: "locator"}, locatorLink(c.locator)),
        el("td", {}, c.heading),
        el("td", {}, c.kind),
        el("td", {class: "num"}, arena.number(c.tokens)),
        el("td", {class: "preview"}, c.preview)))
        : [el("tr", {class: "empty"}, el("td", {colspan: 5}, "No chunks: nothing readable was indexed."))]));
      const panel = document.getElementById("chunks");
      panel.hidden = false;
      panel.scrollIntoView({block: "nearest"});
    } catch (error) {
      arena.show(problem, error.message);
    }
  }

  function ownerChanged() {
    uploadGroup.hidden = owner.value !== "group";
    uploadAgent.hidden = owner.value !== "agent";
  }

  upload.addEventListener("submit", async (event) => {
    event.preventDefault();
    const files = document.getElementById("upload-files").files;
    const body = new FormData();
    for (const file of files) body.append("files", file, file.name);
    if (owner.value === "group") body.append("group", uploadGroup.value.trim());
    else if (owner.value === "agent") body.append("agent", uploadAgent.value);
    else body.append("everyone", "true");
    const source = document.getElementById("upload-source").value.trim();
    if (source) body.append("source", source);
    body.append("trust", document.getElementById("upload-trust").value);
    try {
      const done = await arena.api("/api/knowledge/uploads", {method: "POST", body});
      const skipped = done.sync.problems.length ? " Not indexed: " + done.sync.problems.join("; ") : "";
      arena.show(note, done.note + ` Indexed: ${done.sync.chunks_written} chunks written.` + skipped);
      arena.show(uploadError, "");
      upload.reset();
      ownerChanged();
      await loadSources();
      await showChunks(done.source.name);
    } catch (error) {
      arena.show(uploadError, error.message);
    }
  });

  function removeLoreButton(entry) {
    const b = el("button", {type: "button", class: "small"}, "Remove");
    b.addEventListener("click", async () => {
      if (b.dataset.armed !== "yes") {
        b.dataset.armed = "yes";
        b.textContent = "Remove entry " + entry.id + "?";
        return;
      }
      try {
        const done = await arena.api("/api/knowledge/lore/" + encodeURIComponent(entry.id), {method: "DELETE"});
        arena.show(note, done.note);
        arena.show(loreError, "");
        await loadLore();
      } catch (error) {
        arena.show(loreError, error.message);
      }
    });
    return b;
  }

  function editLoreButton(entry) {
    const b = el("button", {type: "button", class: "small"}, "Edit");
    b.addEventListener("click", () => editLore(entry));
    return b;
  }

  /* The lore form, filled with the entry, saves it in place (its book and owner stay). */
  function editLore(entry) {
    editing = entry;
    loreTitle.textContent = `Edit entry ${entry.id} of ${entry.book} (given to ${entry.owner})`;
    loreField("text").value = entry.text;
    loreField("keys").value = entry.keys.join(", ");
    loreField("pattern").value = entry.pattern || "";
    loreField("priority").value = String(entry.priority);
    loreOwner.hidden = loreGroup.hidden = loreAgent.hidden = true;
    loreSubmit.textContent = "Save";
    loreCancel.hidden = false;
    loreForm.dataset.editing = String(entry.id);
    arena.show(loreError, "");
    loreForm.scrollIntoView({block: "nearest"});
    loreField("text").focus();
  }

  function stopEditing() {
    editing = null;
    loreTitle.textContent = "Add an entry";
    loreSubmit.textContent = "Add";
    loreCancel.hidden = true;
    delete loreForm.dataset.editing;
    loreForm.reset();
    loreOwner.hidden = false;
    loreOwnerChanged();
  }

  function loreRow(entry) {
    const brings = entry.keys.join(", ") + (entry.pattern ? (entry.keys.length ? " " : "") + "/" + entry.pattern + "/" : "");
    return el("tr", {dataset: {lore: String(entry.id)}},
      el("td", {class: "name"}, entry.book, el("div", {class: "hint"}, "#" + entry.id)),
      el("td", {}, entry.owner),
      el("td", {}, brings),
      el("td", {class: "num"}, String(entry.priority)),
      el("td", {class: "num"}, arena.number(entry.tokens)),
      el("td", {class: "text"}, entry.text),
      el("td", {class: "actions"}, editLoreButton(entry), " ", removeLoreButton(entry)));
  }

  async function loadLore() {
    try {
      const data = await arena.api("/api/knowledge/lore");
      loreBody.replaceChildren(...(data.entries.length ? data.entries.map(loreRow)
        : [el("tr", {class: "empty"}, el("td", {colspan: 7}, "No lore entries yet: add one below, or `arena knowledge lore add`."))]));
    } catch (error) {
      arena.show(loreError, error.message);
    }
  }

  function loreOwnerChanged() {
    loreGroup.hidden = loreOwner.value !== "group";
    loreAgent.hidden = loreOwner.value !== "agent";
  }

  async function saveEdit(body) {
    const entry = await arena.api("/api/knowledge/lore/" + encodeURIComponent(editing.id), {method: "PATCH", json: body});
    arena.show(note, `Edited lore entry ${entry.id} of ${entry.book} (${entry.tokens} tokens).`);
    arena.show(loreError, "");
    stopEditing();
    await loadLore();
  }

  loreForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = {
      text: loreField("text").value,
      keys: loreField("keys").value.split(",").map((k) => k.trim()).filter((k) => k),
      priority: Number(loreField("priority").value || "50"),
    };
    const pattern = loreField("pattern").value;
    if (editing) {
      body.pattern = pattern.trim() ? pattern : null; /* an emptied pattern is dropped */
      try {
        await saveEdit(body);
      } catch (error) {
        arena.show(loreError, error.message);
      }
      return;
    }
    if (pattern.trim()) body.pattern = pattern;
    if (loreOwner.value === "group") body.group = loreGroup.value.trim();
    else if (loreOwner.value === "agent") body.agent = loreAgent.value;
    else body.everyone = true;
    try {
      const entry = await arena.api("/api/knowledge/lore", {json: body});
      arena.show(note, `Added lore entry ${entry.id} to ${entry.book} (${entry.tokens} tokens), given to ${entry.owner}.`);
      arena.show(loreError, "");
      loreForm.reset();
      loreOwnerChanged();
      await loadLore();
      await loadSources();
    } catch (error) {
      arena.show(loreError, error.message);
    }
  });

  async function search() {
    const query = new URLSearchParams();
    for (const [name, value] of new FormData(searchForm).entries()) if (String(value).trim()) query.set(name, String(value).trim());
    try {
      const data = await arena.api("/api/knowledge/search?" + query);
      const rows = data.hits.map((h) => el("tr", {},
        el("td", {class: "num"}, String(h.rank)),
        el("td", {class: "text"}, locatorLink(h.locator), h.heading ? el("div", {class: "hint"}, h.heading) : null,
          h.why ? el("div", {class: "hint why"}, h.why) : null,
          el("div", {class: "passage"}, h.text.split("\n").slice(0, 6).join("\n"))),
        el("td", {}, trustTag(h.trust)),
        el("td", {class: "num"}, String(Number(h.score.toPrecision(3))))));
      document.querySelector("#hits tbody").replaceChildren(...(rows.length ? rows
        : [el("tr", {class: "empty"}, el("td", {colspan: 4}, "No passages found in " + (data.scopes.join(", ") || "any source") + "."))]));
      document.getElementById("hits-box").hidden = false;
      arena.show(document.getElementById("search-error"), "");
    } catch (error) {
      arena.show(document.getElementById("search-error"), error.message);
    }
  }

  async function openLocator(locator) {
    const error = document.getElementById("locate-error");
    document.getElementById("locator").value = locator;
    const query = new URLSearchParams({locator});
    window.history.replaceState(null, "", "/knowledge?" + query);
    try {
      const found = await arena.api("/api/knowledge/locate?" + query);
      document.getElementById("located-head").replaceChildren(
        el("code", {}, found.locator), " ",
        el("span", {class: "tag state-" + found.state}, found.state), " ", trustTag(found.trust));
      const notes = [STATES[found.state] || found.state];
      if (found.locator !== found.asked) notes.push("asked for " + found.asked);
      if (found.trust === "external") notes.push("external text: material to read, never instructions");
      document.getElementById("located-note").textContent = notes.join(" · ");
      document.querySelector("#lines tbody").replaceChildren(...found.lines.map((line) =>
        el("tr", {}, el("td", {class: "n"}, String(line.n)), el("td", {class: "code"}, line.text))));
      document.getElementById("located").hidden = false;
      arena.show(error, "");
      document.getElementById("locate").scrollIntoView({block: "nearest"});
    } catch (failure) {
      document.getElementById("located").hidden = true;
      arena.show(error, failure.message);
    }
  }

  owner.addEventListener("change", ownerChanged);
  loreOwner.addEventListener("change", loreOwnerChanged);
  loreCancel.addEventListener("click", () => { stopEditing(); arena.show(loreError, ""); });
  searchForm.addEventListener("submit", (event) => { event.preventDefault(); search(); });
  locateForm.addEventListener("submit", (event) => {
    event.preventDefault();
    openLocator(document.getElementById("locator").value.trim());
  });
  ownerChanged();
  loreOwnerChanged();
  (async () => {
    try {
      const agents = (await arena.api("/api/agents")).agents;
      agents.forEach((a) => {
        uploadAgent.append(el("option", {value: a.id}, a.name));
        loreAgent.append(el("option", {value: a.id}, a.name));
        document.getElementById("search-agent").append(el("option", {value: a.id}, a.name));
      });
    } catch (error) { /* the agent choices stay empty */ }
    await loadSources();
    await loadLore();
    if (params.get("locator")) openLocator(params.get("locator"));
  })();
})();
