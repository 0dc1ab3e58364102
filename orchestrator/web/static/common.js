/* Helpers shared by the console's pages. No framework, no build step.
 * Text from messages is only ever put in the page as text (textContent), except a message's
 * `html`, which the server rendered from Markdown with any raw HTML escaped. */
"use strict";

const arena = {};

/* An element: el("td", {class: "x", title: "y"}, "text", otherElement). */
arena.el = function (tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
};

/* While any request is out, the page's <main> is aria-busy (assistive technology waits for it).
 * It stays busy until the task ends: a request made on the answer of another keeps it busy. */
arena.pending = 0;
arena.busy = function (change) {
  arena.pending += change;
  const main = document.querySelector("main");
  if (!main) return;
  if (arena.pending > 0) main.setAttribute("aria-busy", "true");
  else window.setTimeout(() => { if (arena.pending === 0) main.removeAttribute("aria-busy"); }, 0);
};

/* A JSON request; throws an Error whose message is the server's one-line reason. */
arena.api = async function (path, options) {
  arena.busy(+1);
  try {
    return await arena.request(path, options);
  } finally {
    arena.busy(-1);
  }
};

arena.request = async function (path, options) {
  const init = Object.assign({headers: {"Accept": "application/json"}, credentials: "same-origin"}, options || {});
  if (init.json !== undefined) {
    init.method = init.method || "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(init.json);
    delete init.json;
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    throw new Error("the console cannot be reached (is `arena up` still running?)");
  }
  if (response.status === 401) {
    window.location.assign("/login?next=" + encodeURIComponent(window.location.pathname));
    throw new Error("log in first");
  }
  let body = null;
  try {
    body = await response.json();
  } catch (error) {
    body = null;
  }
  if (!response.ok) {
    const reason = body && (body.error || body.detail);
    const error = new Error(typeof reason === "string" ? reason : "request failed (" + response.status + ")");
    error.status = response.status;
    throw error;
  }
  return body;
};

/* "14:05" today, "2026-03-01 14:05" otherwise (in the browser's time zone). */
arena.when = function (iso) {
  if (!iso) return "";
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return iso;
  const pad = (n) => String(n).padStart(2, "0");
  const time = pad(at.getHours()) + ":" + pad(at.getMinutes());
  const now = new Date();
  if (at.toDateString() === now.toDateString()) return time;
  return at.getFullYear() + "-" + pad(at.getMonth() + 1) + "-" + pad(at.getDate()) + " " + time;
};

arena.number = function (n) {
  return typeof n === "number" ? n.toLocaleString("en") : "–";
};

arena.bytes = function (n) {
  if (typeof n !== "number") return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return (unit === 0 ? value : value.toFixed(1)) + " " + units[unit];
};

arena.show = function (node, text) {
  node.textContent = text || "";
  node.hidden = !text;
};
