// turnback's review page. Plain JavaScript, no dependencies: everything it needs ships with
// turnback. It reads the JSON API under /api/ (the CLI's --json shapes) and builds the DOM with
// textContent only, so nothing from a session is ever parsed as HTML.
"use strict";

const CONFIG = JSON.parse(document.getElementById("config").textContent);
const main = document.getElementById("main");
const crumbs = document.getElementById("crumbs");

// Files past this many diff lines start collapsed; a file shows this many lines before "more".
const COLLAPSE_OVER = 400;
const CHUNK = 300;
// The session page draws this many turns at a time, newest first.
const PAGE = 50;
// Narrower than this, a split diff is drawn unified.
const NARROW = "(max-width: 760px)";
// A running turn's diff is asked for again this often (each time a capture of the workspace).
const REFRESH = 2000;

// -- small DOM and formatting helpers -------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function when(seconds) {
  if (!seconds) return "–";
  const date = new Date(seconds * 1000);
  const ago = (Date.now() - date.getTime()) / 1000;
  if (ago < 60) return "just now";
  if (ago < 3600) return `${Math.floor(ago / 60)} min ago`;
  if (ago < 86400) return `${Math.floor(ago / 3600)} h ago`;
  return date.toLocaleString();
}

function exact(seconds) {
  return seconds ? new Date(seconds * 1000).toLocaleString() : "";
}

function short(text, width) {
  const line = String(text || "").split(/\s+/).join(" ").trim();
  return line.length <= width ? line : line.slice(0, width - 1) + "…";
}

// What a session is called: its title, else its first prompt, else its id.
function sessionName(session, firstPrompt) {
  return session.title || short(promptText(firstPrompt), 60) || session.id.slice(0, 12);
}

function promptText(prompt) {
  if (typeof prompt === "string") return prompt;
  if (Array.isArray(prompt)) return prompt.map((b) => (b && b.type === "text" ? b.text : "")).join("");
  return "";
}

const STATUS_WORDS = {
  completed: "completed",
  running: "running",
  failed: "failed",
  cancelled: "cancelled",
  interrupted: "interrupted · recovered",
  set_aside: "set aside",
};

function badge(status, extra) {
  return el("span", { class: `badge s-${status}`, text: extra || STATUS_WORDS[status] || status });
}

function counts(files) {
  let add = 0;
  let del = 0;
  for (const f of files) {
    add += f.additions || 0;
    del += f.deletions || 0;
  }
  return el("span", { class: "counts" },
    el("span", { class: "add", text: `+${add}` }), " ", el("span", { class: "del", text: `−${del}` }));
}

const KIND_LETTERS = { added: "A", modified: "M", deleted: "D", renamed: "R", type_changed: "T" };

function toast(text, kind) {
  const box = document.getElementById("toast");
  box.textContent = text;
  box.className = kind || "";
  box.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { box.hidden = true; }, 6000);
}

// -- the API ------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `the server answered ${status}`);
    this.status = status;
    this.hint = error.hint || "Reload the page; if it keeps happening, restart `turnback ui`.";
    this.paths = error.paths || [];
  }
}

// The page's key, from logging in with the token of the address it was opened on (after "#",
// which no request carries). It is kept in this origin's storage -- no other port's page can
// read it -- and sent as a header that no other page can make the browser send: it is what
// every API request is allowed by. No cookie is used: cookies reach every port of this host.
const KEY = "turnback.key";

function authorization() {
  return { authorization: `Bearer ${localStorage.getItem(KEY) || ""}` };
}

async function login() {
  const token = new URLSearchParams(location.hash.slice(1)).get("token");
  if (token === null) return;
  history.replaceState(null, "", location.pathname + location.search);  // out of the address
  const data = await send("/api/login", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ token }) });
  localStorage.setItem(KEY, data.key);
}

async function api(path, body) {
  const options = { headers: authorization() };
  if (body !== undefined) {
    options.method = "POST";
    options.headers["content-type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  return send(path, options);
}

async function send(path, options) {
  let response;
  try {
    response = await fetch(path, { ...options, credentials: "omit" });
  } catch (e) {
    throw new ApiError(0, { error: {
      message: "the turnback ui server cannot be reached",
      hint: "Start `turnback ui` again and open the address it prints.",
    } });
  }
  const data = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

function problem(error) {
  return el("div", { class: "problem", role: "alert" },
    el("strong", { text: "What happened: " }), error.message,
    el("br"), el("strong", { text: "What to do: " }), error.hint,
    error.paths && error.paths.length
      ? el("ul", { class: "paths" }, error.paths.map((p) => el("li", {}, el("code", { text: p }))))
      : null);
}

// -- live updates ---------------------------------------------------------------------------

// Server-sent events, read with fetch (EventSource cannot send the key), reconnecting as
// EventSource would.
function listen(sessionId, handlers) {
  const live = document.getElementById("live");
  const stop = new AbortController();
  window.addEventListener("pagehide", () => stop.abort());
  let first = true;
  const dispatch = (kind, data) => {
    if (kind === "log") {
      if (first) { first = false; return; }  // the page was just drawn from the same state
      if (handlers.log) handlers.log();
    } else if (kind === "running" && handlers.running) handlers.running(JSON.parse(data));
  };
  const read = async () => {
    const response = await fetch(`/api/sessions/${sessionId}/stream`, { headers: authorization(), credentials: "omit", signal: stop.signal });
    if (!response.ok || !response.body) return;
    live.hidden = false;
    live.classList.remove("off");
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        let kind = "message";
        const data = [];
        for (const line of buffer.slice(0, end).split("\n")) {
          if (line.startsWith("event: ")) kind = line.slice(7);
          else if (line.startsWith("data: ")) data.push(line.slice(6));
        }
        buffer = buffer.slice(end + 2);
        dispatch(kind, data.join("\n"));
      }
    }
  };
  (async () => {
    while (!stop.signal.aborted) {
      await read().catch(() => null);
      live.classList.add("off");
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  })();
}

// -- keyboard -------------------------------------------------------------------------------

const keymap = new Map();

function bindKeys(bindings) {
  keymap.clear();
  for (const [keys, what, run] of bindings) for (const key of keys) keymap.set(key, { what, run });
}

document.addEventListener("keydown", (event) => {
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  const target = event.target;
  if (target && (target.tagName === "INPUT" || target.tagName === "SELECT" || target.tagName === "TEXTAREA")) return;
  if (event.key === "Escape") { closeOverlay(); return; }
  if (!document.getElementById("overlay").hidden) return;
  if (event.key === "?") { showKeys(); event.preventDefault(); return; }
  const binding = keymap.get(event.key);
  if (binding) { binding.run(event); event.preventDefault(); }
});

document.getElementById("keys").addEventListener("click", () => showKeys());

function showKeys() {
  const rows = [];
  const seen = new Set();
  for (const [key, { what }] of keymap) {
    if (seen.has(what)) { rows[rows.length - 1][0].push(key); continue; }
    seen.add(what);
    rows.push([[key], what]);
  }
  rows.push([["?"], "this list"], [["Esc"], "close"]);
  openOverlay(el("div", { class: "dialog", role: "dialog", "aria-label": "Keyboard shortcuts" },
    el("h2", { text: "Keyboard" }),
    el("table", { class: "keys" }, rows.map(([keys, what]) =>
      el("tr", {}, el("td", {}, keys.map((k) => el("kbd", { text: k }))), el("td", { text: what })))),
    el("div", { class: "buttons" }, el("button", { type: "button", onclick: closeOverlay, text: "Close" }))));
}

function openOverlay(content) {
  const overlay = document.getElementById("overlay");
  overlay.replaceChildren(content);
  overlay.hidden = false;
  overlay.onclick = (event) => { if (event.target === overlay) closeOverlay(); };
  const focus = content.querySelector("[autofocus]") || content.querySelector("button");
  if (focus) focus.focus();
}

function closeOverlay() {
  const overlay = document.getElementById("overlay");
  overlay.hidden = true;
  overlay.replaceChildren();
}

function moveFocus(selector, step) {
  const items = [...document.querySelectorAll(selector)];
  if (!items.length) return null;
  const at = items.indexOf(document.activeElement.closest(selector));
  const next = items[Math.max(0, Math.min(items.length - 1, at < 0 ? (step > 0 ? 0 : items.length - 1) : at + step))];
  next.focus();
  next.scrollIntoView({ block: "nearest" });
  return next;
}

function setCrumbs(...parts) {
  crumbs.replaceChildren(...parts.flatMap((p, i) => (i ? [el("span", { class: "sep", text: "/" }), p] : [p])));
}

// -- page: sessions -------------------------------------------------------------------------

async function sessionsPage() {
  document.title = "turnback · sessions";
  setCrumbs(el("span", { text: "sessions" }));
  const sessions = await api("/api/sessions");
  if (!sessions.length) {
    main.replaceChildren(el("section", { class: "empty" },
      el("h1", { text: "No sessions yet" }),
      el("p", {}, "Run ", el("code", { text: "turnback demo --keep" }),
        " to see turnback at work, or start an agent behind ", el("code", { text: "turnback acp" }), ".")));
    return;
  }
  const rows = sessions.map((s) => el("tr", { class: "row", tabindex: "0", "data-href": `/sessions/${s.id}` },
    el("td", { "data-label": "session" }, el("a", { href: `/sessions/${s.id}`, class: `title${s.title ? "" : " untitled"}`, title: s.title ? null : s.first_prompt, text: sessionName(s, s.first_prompt) }),
      el("div", { class: "muted mono small", text: s.id.slice(0, 12) })),
    el("td", { "data-label": "workspace", class: "workspace mono", title: s.workspace, text: s.workspace }),
    el("td", { "data-label": "agent", text: s.agent || "–" }),
    el("td", { "data-label": "turns", class: "num", text: s.turns }),
    el("td", { "data-label": "head", title: s.head ? `turn ${s.turns}, token ${s.head}` : null, text: s.head ? `turn ${s.turns}` : "–" }),
    el("td", { "data-label": "status" }, el("span", { class: `badge s-${s.status}`, text: s.status })),
    el("td", { "data-label": "pending", class: "num" }, s.pending_requests.length ? el("span", { class: "badge s-running", text: s.pending_requests.length }) : "–"),
    el("td", { "data-label": "set aside", class: "num" }, s.set_aside ? el("span", { class: "badge s-set_aside", text: s.set_aside }) : "–"),
    el("td", { "data-label": "last activity", title: exact(s.updated_at), text: when(s.updated_at) })));
  main.replaceChildren(el("section", {},
    el("h1", { text: "Sessions" }),
    el("div", { class: "scroll" }, el("table", { class: "sessions" },
      el("thead", {}, el("tr", {}, ["session", "workspace", "agent", "turns", "head", "status", "pending", "set aside", "last activity"].map((h) => el("th", { text: h })))),
      el("tbody", {}, rows)))));
  for (const row of rows) row.addEventListener("keydown", (e) => { if (e.key === "Enter") location.href = row.dataset.href; });
  bindKeys([
    [["j", "ArrowDown"], "next session", () => moveFocus("tr.row", 1)],
    [["k", "ArrowUp"], "previous session", () => moveFocus("tr.row", -1)],
  ]);
  moveFocus("tr.row", 1);
}

// -- page: a session's timeline ---------------------------------------------------------------

async function timelinePage(sessionId) {
  let state = null;
  let liveBox = null;
  let shown = PAGE;  // how many turns are drawn, newest first
  const filter = el("input", { type: "search", "data-key": "filter", placeholder: "e.g. src/app.py", "aria-label": "Filter by file: only turns that changed a path containing", oninput: () => { shown = PAGE; draw(); } });
  const jump = el("input", { type: "text", inputmode: "numeric", "data-key": "jump", size: "6", placeholder: "N", "aria-label": "Jump to turn" });
  const filterNote = el("span", { class: "muted small", role: "status" });
  const finder = el("div", { class: "finder" },
    el("label", { class: "field" }, el("span", { class: "muted", text: "Filter by file" }), filter),
    el("form", { class: "field", onsubmit: (e) => { e.preventDefault(); goTo(jump.value); } },
      el("label", { class: "field" }, el("span", { class: "muted", text: "Jump to turn" }), jump), el("button", { type: "submit", text: "Go" })),
    filterNote);

  // Draws turn ``value`` (clearing the filter, showing as many older turns as it takes) and
  // moves to it.
  function goTo(value) {
    const number = Number(String(value).trim().replace(/^#/, ""));
    const turns = state.log.turns;
    const turn = turns.find((t) => t.number === number && t.status !== "set_aside");
    if (!Number.isInteger(number) || !turn) {
      const last = turns.length ? Math.max(...turns.map((t) => t.number)) : 0;
      toast(`There is no turn ${String(value).trim() || "(empty)"}: this session has turns 1 to ${last}.`, "bad");
      return;
    }
    filter.value = "";
    const at = turns.length - 1 - turns.indexOf(turn);
    shown = Math.max(shown, Math.ceil((at + 1) / PAGE) * PAGE);
    draw();
    const node = document.querySelector(`li.node[data-key="${turn.token}"]`);
    node.scrollIntoView({ block: "center" });
    node.focus();
  }

  async function load() {
    const [log, extra] = await Promise.all([
      api(`/api/sessions/${sessionId}/log`),
      api(`/api/sessions/${sessionId}/timeline`),
    ]);
    state = { log, extra };
    draw();
  }

  function head() {
    const live = state.log.turns.filter((t) => t.reverted_by === null && ["completed", "failed", "cancelled", "interrupted"].includes(t.status));
    return live.length ? Math.max(...live.map((t) => t.number)) : 0;
  }

  function draw() {
    const { log, extra } = state;
    const session = log.session;
    const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.key : null;
    const name = sessionName(session, log.turns.length ? log.turns[0].prompt : null);
    document.title = `turnback · ${name}`;
    setCrumbs(el("a", { href: "/", text: "sessions" }), el("span", { text: name }));
    const mark = extra.review_mark;
    const top = head();
    const byToken = new Map(log.turns.map((t) => [t.token, t]));
    const revertsAfter = new Map();
    for (const r of log.reverts) {
      const key = r.from_head || "";
      if (!revertsAfter.has(key)) revertsAfter.set(key, []);
      revertsAfter.get(key).push(r);
    }
    // Newest first, a page of turns at a time: a long session opens at its head and draws
    // only what is on screen; "Show older turns", the jump and the filter reach the rest.
    const wanted = filter.value.trim().toLowerCase();
    const matches = (turn) => !wanted || turn.files.some((f) => f.path.toLowerCase().includes(wanted) || (f.old_path || "").toLowerCase().includes(wanted));
    const picked = log.turns.filter(matches).reverse();
    const drawn = picked.slice(0, shown);
    const items = [];
    if (!wanted && log.since_head && log.since_head.length) items.push(sinceMark(log.since_head, top));
    for (const turn of drawn) {
      if (!wanted) for (const r of (revertsAfter.get(turn.token) || []).slice().reverse()) items.push(revertMark(r, byToken));
      items.push(turnNode(turn, mark));
      if (!wanted && turn.outside.length) items.push(outsideMark(turn));
    }
    if (!wanted && drawn.length === picked.length) for (const r of (revertsAfter.get("") || []).slice().reverse()) items.push(revertMark(r, byToken));
    const left = picked.length - drawn.length;
    const older = left > 0
      ? el("button", { type: "button", class: "older", onclick: () => { shown += PAGE; draw(); }, text: `Show ${Math.min(PAGE, left)} older turn${Math.min(PAGE, left) === 1 ? "" : "s"} (${left} left)` })
      : null;
    filterNote.textContent = wanted ? `${picked.length} of ${log.turns.length} turns changed a path with “${filter.value.trim()}”` : "";
    const lastRevert = log.reverts.length ? log.reverts[log.reverts.length - 1] : null;
    const canUndo = lastRevert && lastRevert.state === "committed";
    const actions = el("div", { class: "actions" },
      mark !== null && mark < top
        ? el("a", { class: "button", href: `/sessions/${sessionId}/range?from=${mark}&to=${top}`, text: `Since I last looked (${mark + 1 === top ? `turn ${top}` : `turns ${mark + 1}–${top}`})` })
        : null,
      !CONFIG.readOnly && top > 0 && mark !== top
        ? el("button", { type: "button", onclick: () => setMark(top), text: top === 1 ? "Mark turn 1 reviewed" : `Mark turns 1–${top} reviewed` })
        : null,
      !CONFIG.readOnly && canUndo
        ? el("button", { type: "button", class: "undo", onclick: () => confirmUndo(turnNumber(lastRevert.to_turn, byToken)), text: `Undo the revert to turn ${turnNumber(lastRevert.to_turn, byToken)}` })
        : null,
      rangePicker(top));
    main.replaceChildren(el("section", { class: "session" },
      el("div", { class: "session-head" },
        el("h1", { class: session.title ? null : "untitled", text: session.title || !log.turns.length ? name : `“${name}”` }),
        el("dl", { class: "facts" },
          el("dt", { text: "workspace" }), el("dd", { class: "mono", text: session.workspace }),
          el("dt", { text: "agent" }), el("dd", { text: session.agent || "–" }),
          el("dt", { text: "head" }), el("dd", { text: top ? `turn ${top}` : "before the first turn" }),
          el("dt", { text: "session" }), el("dd", { class: "mono", text: session.id })),
        actions),
      extra.unrecovered.length ? setAsideBox(extra.unrecovered) : null,
      log.turns.length > 1 ? finder : null,
      log.turns.length ? el("ol", { class: "timeline", "aria-label": "Turns, newest first" }, items) : el("p", { class: "empty", text: "No turns yet: this page shows them as they begin." }),
      older));
    const again = focused && document.querySelector(`[data-key="${focused}"]`);
    if (again) again.focus();
  }

  function turnNumber(token, byToken) {
    if (!token) return 0;
    const turn = byToken.get(token);
    return turn ? turn.number : "?";
  }

  function turnNode(turn, mark) {
    const reverted = turn.reverted_by !== null;
    const fresh = mark !== null && turn.number > mark && !reverted && turn.status !== "set_aside";
    const link = `/sessions/${sessionId}/turns/${turn.status === "set_aside" ? turn.token : turn.number}`;
    const node = el("li", { class: `node st-${turn.status}${reverted ? " reverted" : ""}`, tabindex: "0", "data-key": turn.token, "data-href": link },
      el("span", { class: "dot", "aria-hidden": "true" }),
      el("div", { class: "card" },
        el("div", { class: "line" },
          el("a", { class: "number", href: link, text: turn.status === "set_aside" ? "—" : `#${turn.number}` }),
          badge(turn.status),
          reverted ? badge("reverted", "reverted") : null,
          fresh ? badge("new", "new since review") : null,
          el("span", { class: "muted small", title: exact(turn.started_at), text: when(turn.started_at) }),
          el("span", { class: "muted small", text: `${turn.events} event${turn.events === 1 ? "" : "s"}${turn.status === "running" ? " so far" : ""}` }),
          turn.files.length ? el("span", { class: "small" }, `${turn.files.length} file${turn.files.length === 1 ? "" : "s"} `, counts(turn.files)) : null),
        el("a", { class: "prompt", href: link, text: short(promptText(turn.prompt), 200) || "(no text)" }),
        turn.detail ? el("div", { class: "detail", text: turn.detail }) : null,
        turn.files.length ? el("div", { class: "files small mono" }, turn.files.slice(0, 6).map((f) =>
          el("span", { class: `file k-${f.kind}` }, el("b", { text: KIND_LETTERS[f.kind] || "?" }), " ", f.path)),
          turn.files.length > 6 ? el("span", { class: "muted", text: `… ${turn.files.length - 6} more` }) : null) : null,
        turn.status === "running" ? el("div", { class: "livebox", "aria-live": "polite" }, el("span", { class: "muted", text: "waiting for the agent…" })) : null,
        !CONFIG.readOnly && !reverted && turn.status !== "running" && turn.status !== "set_aside" && turn.number < head()
          ? el("div", { class: "node-actions" }, el("button", { type: "button", class: "small-button", onclick: () => revertDialog(turn.number), text: `Revert to here…` }))
          : null));
    node.addEventListener("keydown", (e) => { if (e.key === "Enter" && e.target === node) location.href = link; });
    if (turn.status === "running") liveBox = node.querySelector(".livebox");
    return node;
  }

  function outsideMark(turn) {
    return el("li", { class: "mark outside" },
      el("span", { class: "dot", "aria-hidden": "true" }),
      el("div", {}, el("strong", { text: "Changed outside any turn" }), ` before turn ${turn.number}: `,
        el("span", { class: "mono small", text: turn.outside.slice(0, 5).map((f) => `${KIND_LETTERS[f.kind]} ${f.path}`).join(", ") + (turn.outside.length > 5 ? `, … ${turn.outside.length - 5} more` : "") }),
        " ", counts(turn.outside)));
  }

  function sinceMark(files, top) {
    return el("li", { class: "mark outside since" },
      el("span", { class: "dot", "aria-hidden": "true" }),
      el("div", {}, el("strong", { text: "Changed since the head" }), ` (turn ${top}), in no turn yet: `,
        el("span", { class: "mono small", text: files.slice(0, 5).map((f) => `${KIND_LETTERS[f.kind]} ${f.path}`).join(", ") + (files.length > 5 ? `, … ${files.length - 5} more` : "") }),
        " ", counts(files)));
  }

  function revertMark(r, byToken) {
    const scope = r.files && r.conversation ? "files and conversation" : r.files ? "files only" : "conversation only";
    const words = { committed: "", undone: " · undone", rolled_back: " · rolled back", started: " · in progress", undoing: " · being undone", files_restored: " · in progress" };
    if (r.state === "rolled_back" && (r.detail || "").startsWith("refused")) words.rolled_back = " · refused, nothing changed";
    return el("li", { class: `mark revert r-${r.state}` },
      el("span", { class: "dot", "aria-hidden": "true" }),
      el("div", {}, el("strong", { text: `Reverted to turn ${turnNumber(r.to_turn, byToken)}` }),
        ` (${scope}${r.keep_user_edits ? ", kept hand edits" : ""})${words[r.state] ?? ` · ${r.state}`}`,
        el("span", { class: "muted small", title: exact(r.created_at), text: ` ${when(r.created_at)}` }),
        r.detail ? el("div", { class: "detail", text: r.detail }) : null));
  }

  function setAsideBox(items) {
    return el("section", { class: "aside-box" },
      el("h2", { text: `${items.length} turn${items.length === 1 ? "" : "s"} set aside` }),
      el("p", { class: "muted", text: "Recovery could not put these back in the conversation. They are kept until you apply or discard them." }),
      items.map((u) => el("div", { class: "aside-item" },
        el("a", { href: `/sessions/${sessionId}/turns/${u.token}`, class: "mono", text: u.token.slice(0, 12) }),
        ` ${short(promptText(u.prompt), 80)} · ${u.events} events`,
        el("div", { class: "detail", text: u.reason }),
        CONFIG.readOnly ? null : el("div", { class: "buttons" },
          el("button", { type: "button", onclick: () => settle(u, "apply"), text: "Apply on top of the head" }),
          el("button", { type: "button", class: "danger", onclick: () => settle(u, "discard"), text: "Discard" })))));
  }

  function rangePicker(top) {
    if (top < 1) return null;
    const options = (selected) => Array.from({ length: top + 1 }, (_, n) => el("option", { value: n, selected: n === selected, text: n === 0 ? "0 (before turn 1)" : `turn ${n}` }));
    const from = el("select", { "aria-label": "from the end of" }, options(Math.max(0, top - 1)));
    const to = el("select", { "aria-label": "to the end of" }, options(top));
    return el("form", { class: "range", onsubmit: (e) => { e.preventDefault(); location.href = `/sessions/${sessionId}/range?from=${from.value}&to=${to.value}`; } },
      el("span", { class: "muted", text: "Diff from" }), from, el("span", { class: "muted", text: "to" }), to, el("button", { type: "submit", text: "Show" }));
  }

  async function setMark(number) {
    try {
      await api(`/api/sessions/${sessionId}/review-mark`, { turn: number });
      toast(`Marked everything up to turn ${number} as reviewed.`);
      await load();
    } catch (error) { toast(`${error.message}. ${error.hint}`, "bad"); }
  }

  // An undo moves files and turns as much as the revert did: it is asked for twice.
  function confirmUndo(number) {
    const go = el("button", { type: "button", class: "danger", text: "Undo the revert" });
    go.addEventListener("click", () => { closeOverlay(); undo(); });
    openOverlay(el("div", { class: "dialog", role: "dialog", "aria-label": `Undo the revert to turn ${number}` },
      el("h2", { text: `Undo the revert to turn ${number}?` }),
      el("p", { text: "The files, the turns and the head go back to how they were just before that revert." }),
      el("div", { class: "buttons" }, el("button", { type: "button", onclick: closeOverlay, text: "Cancel", autofocus: true }), go)));
  }

  async function undo() {
    try {
      const result = await api(`/api/sessions/${sessionId}/undo`, {});
      toast(`Undid revert ${result.id}: files, turns and head are as before it.`, "good");
      await load();
    } catch (error) {
      openOverlay(el("div", { class: "dialog" }, el("h2", { text: "The undo did not happen" }), problem(error),
        el("div", { class: "buttons" }, el("button", { type: "button", onclick: closeOverlay, text: "Close" }))));
    }
  }

  async function settle(item, verb) {
    if (verb === "discard" && !confirm(`Discard set-aside turn ${item.token.slice(0, 12)} and its ${item.events} events for good?`)) return;
    try {
      await api(`/api/sessions/${sessionId}/unrecovered/${item.token}/${verb}`, {});
      toast(verb === "apply" ? "Applied the set-aside turn on top of the head." : "Discarded the set-aside turn.", "good");
      await load();
    } catch (error) { toast(`${error.message}. ${error.hint}`, "bad"); }
  }

  function revertDialog(number) {
    const scope = (value, label, checked) => el("label", { class: "choice" }, el("input", { type: "radio", name: "scope", value, checked }), label);
    const keep = el("input", { type: "checkbox", name: "keep" });
    const plan = el("div", { class: "plan", "aria-live": "polite" }, el("p", { class: "muted", text: "Working out what the revert would do…" }));
    const result = el("div", { class: "result" });
    const go = el("button", { type: "button", class: "danger", disabled: true, text: `Revert to turn ${number}` });
    const dialog = el("div", { class: "dialog", role: "dialog", "aria-label": `Revert to turn ${number}` },
      el("h2", { text: `Revert to turn ${number}?` }),
      el("p", {}, `${number + 1 === head() ? `Turn ${head()} leaves` : `Turns ${number + 1}–${head()} leave`} the conversation and ${number + 1 === head() ? "is" : "are"} kept as reverted history. You can undo this revert.`),
      el("fieldset", {}, el("legend", { text: "What to rewind" }),
        scope("both", "Files and conversation", true), scope("files", "Files only", false), scope("conversation", "Conversation only", false),
        el("label", { class: "choice" }, keep, "Keep my edits: undo only the agent's changes")),
      plan,
      result,
      el("div", { class: "buttons" }, el("button", { type: "button", onclick: closeOverlay, text: "Cancel" }), go));
    const chosen = () => ({ to_turn: number, scope: dialog.querySelector("input[name=scope]:checked").value, keep_user_edits: keep.checked });
    let asked = 0;
    const preview = async () => {
      const ask = ++asked;
      const options = chosen();
      go.disabled = true;
      result.replaceChildren();
      const query = new URLSearchParams({ to_turn: options.to_turn, scope: options.scope, keep_user_edits: options.keep_user_edits ? "1" : "0" });
      try {
        const found = await api(`/api/sessions/${sessionId}/revert-plan?${query}`);
        if (ask !== asked) return;
        plan.replaceChildren(...planView(found, options));
        const refused = options.keep_user_edits && found.conflicts.length;
        go.disabled = Boolean(refused);
        const overwritten = options.scope !== "conversation" && !options.keep_user_edits ? found.conflicts.length : 0;
        go.textContent = overwritten ? `Revert and overwrite ${overwritten === 1 ? "your edit" : `${overwritten} of your edits`}` : `Revert to turn ${number}`;
        if (refused) result.replaceChildren(el("p", { class: "problem", text: "Your edits clash with the agent's changes in the files above, so this revert would be refused and change nothing. Revert without “keep my edits” to overwrite them, or move your edits aside first." }));
      } catch (error) {
        if (ask !== asked) return;
        plan.replaceChildren(problem(error));
      }
    };
    dialog.addEventListener("change", preview);
    go.addEventListener("click", async () => {
      go.disabled = true;
      try {
        const done = await api(`/api/sessions/${sessionId}/revert`, chosen());
        closeOverlay();
        toast(`Reverted to turn ${number} (revert ${done.id}). “Undo” puts everything back.`, "good");
        await load();
      } catch (error) {
        result.replaceChildren(problem(error));
        go.disabled = false;
      }
    });
    openOverlay(dialog);
    preview();
  }

  function planView(found, options) {
    const counted = (f) => (f.binary ? el("span", { class: "muted", text: "binary" }) : counts([f]));
    const group = (title, items, kind, extra) => (items.length
      ? el("div", { class: `plan-group plan-${kind}` }, el("h3", {}, title, el("span", { class: "muted", text: ` ${items.length}` })),
        el("ul", { class: "plan-files mono small" }, items.slice(0, 200).map((f) => el("li", {}, el("span", { class: "path", text: f.path }), " ", extra(f)))),
        items.length > 200 ? el("p", { class: "muted", text: `… and ${items.length - 200} more` }) : null)
      : null);
    const clash = options.keep_user_edits ? "your edit clashes with the agent's change: the revert refuses it" : "your edit: the revert overwrites it, and “Undo” brings it back";
    // the hand edits in the way come first; ignored paths, which a revert never touches, are a count
    const ignored = found.keep.filter((f) => f.reason === "ignored");
    const folded = ignored.length > 3;
    const kept = folded ? found.keep.filter((f) => f.reason !== "ignored") : found.keep;
    const parts = [
      group("Your edits in the way", found.conflicts, "conflict", () => el("span", { class: "warn", text: `(${clash})` })),
      group("Restored", found.restore, "restore", counted),
      group("Deleted", found.delete, "delete", counted),
      group("Kept as they are", kept, "keep", (f) => el("span", { class: "muted", text: `(${f.reason})` })),
      folded ? el("p", { class: "muted plan-ignored", text: `${ignored.length} ignored paths are kept as they are (a revert never touches them).` }) : null,
    ].filter(Boolean);
    if (options.scope === "conversation") return [el("p", { class: "muted", text: "Only the conversation moves: no file is touched." })];
    return parts.length ? parts : [el("p", { class: "muted", text: "No file changes: the files are already as they were after this turn." })];
  }

  await load();
  requestAnimationFrame(() => performance.mark("turnback:first-screen"));
  listen(sessionId, {
    log: () => load().catch((e) => toast(e.message, "bad")),
    running: (data) => {
      if (liveBox && liveBox.isConnected) liveBox.replaceChildren(liveTail(data.messages));
    },
  });
  bindKeys([
    [["j", "ArrowDown"], "next turn down (older)", () => moveFocus("li.node", 1)],
    [["k", "ArrowUp"], "next turn up (newer)", () => moveFocus("li.node", -1)],
    [["/"], "filter the turns by file", () => filter.focus()],
    [["g"], "jump to a turn", () => jump.focus()],
    [["o"], "open the focused turn", () => { const n = document.activeElement.closest("li.node"); if (n) location.href = n.dataset.href; }],
    [["u"], "back to the sessions", () => { location.href = "/"; }],
  ]);
}

function liveTail(messages) {
  const last = messages.filter((m) => m.kind !== "user").slice(-3);
  if (!last.length) return el("span", { class: "muted", text: "waiting for the agent…" });
  return el("div", {}, last.map((m) => el("div", { class: `live-${m.kind}` },
    el("span", { class: "muted small", text: `${m.kind} ` }),
    m.kind === "tool_call" ? `${m.data.title || m.text} (${m.data.status || "pending"})` : short(m.text, 300))));
}

// -- the conversation -------------------------------------------------------------------------

function conversation(shown) {
  const items = shown.messages.map((m) => {
    if (m.kind === "tool_call") {
      const status = m.data.status || "pending";
      return el("div", { class: "msg tool" },
        el("div", { class: "line" }, el("span", { class: "role", text: "tool" }), el("strong", { text: m.data.title || m.text || "tool call" }),
          m.data.kind ? el("span", { class: "muted small", text: m.data.kind }) : null, badge(status === "completed" ? "completed" : status === "failed" ? "failed" : "running", status)),
        toolOutput(m.data));
    }
    if (m.kind === "plan") {
      return el("div", { class: "msg plan" }, el("span", { class: "role", text: "plan" }),
        el("ol", {}, (m.data.entries || []).map((e) => el("li", { class: `plan-${e.status}` }, el("span", { class: "muted small", text: `${e.status} ` }), e.content))));
    }
    if (m.kind === "thought") {
      return el("details", { class: "msg thought" }, el("summary", {}, el("span", { class: "role", text: "thought" }), short(m.text, 90)), el("div", { class: "text", text: m.text }));
    }
    return el("div", { class: `msg ${m.kind}` }, el("span", { class: "role", text: m.kind === "agent" ? "agent" : m.kind === "user" ? "you" : m.kind }), el("div", { class: "text", text: m.text }));
  });
  const asked = new Map();
  for (const e of shown.events || []) {
    const ev = e.event || {};
    if (e.kind === "_turnback/permission_requested") asked.set(ev.requestId, { ev, answer: null });
    if (e.kind === "_turnback/permission_answered" && asked.has(ev.requestId)) asked.get(ev.requestId).answer = ev;
  }
  if (asked.size) {
    items.push(el("div", { class: "msg permission" }, el("span", { class: "role", text: "permissions" }),
      el("ul", {}, [...asked.values()].map(({ ev, answer }) => {
        const title = (ev.toolCall && ev.toolCall.title) || ev.title || "a tool call";
        const said = answer ? (answer.optionId || (answer.outcome && (answer.outcome.optionId || answer.outcome.outcome)) || "answered") : "not answered";
        return el("li", {}, `asked to allow ${title}: `, el("strong", { text: said }));
      }))));
  }
  return items.length ? items : [el("p", { class: "muted", text: "No messages." })];
}

function toolOutput(data) {
  const parts = [];
  for (const c of data.content || []) {
    if (c && c.type === "content" && c.content && c.content.type === "text") parts.push(c.content.text);
    if (c && c.type === "diff") parts.push(`edited ${c.path}`);
  }
  if (!parts.length) return null;
  const text = parts.join("\n");
  return el("details", { class: "tool-output" }, el("summary", { class: "muted small", text: short(text, 80) }), el("pre", { text }));
}

// -- diffs ----------------------------------------------------------------------------------

// A tiny highlighter: keywords, strings, comments and numbers, one line at a time (a line that
// continues a block comment or a multi-line string is left plain).
const KEYWORDS = {
  py: "and as assert async await break class continue def del elif else except False finally for from global if import in is lambda None nonlocal not or pass raise return True try while with yield self match case",
  js: "async await break case catch class const continue default delete do else export extends false finally for from function if import in instanceof let new null return super switch this throw true try typeof undefined var void while yield interface type enum implements readonly",
  go: "break case chan const continue default defer else fallthrough for func go goto if import interface map package range return select struct switch type var nil true false",
  rs: "as async await break const continue crate else enum extern false fn for if impl in let loop match mod move mut pub ref return self Self static struct super trait true type unsafe use where while",
  c: "auto break case char const continue default do double else enum extern float for goto if int long register return short signed sizeof static struct switch typedef union unsigned void volatile while class public private protected new delete this true false null nullptr namespace template using bool",
  sh: "if then else elif fi for while do done case esac in function return local export set echo",
};
const LANGS = { py: "py", pyi: "py", js: "js", mjs: "js", cjs: "js", ts: "js", tsx: "js", jsx: "js", go: "go", rs: "rs", c: "c", h: "c", cc: "c", cpp: "c", hpp: "c", java: "c", cs: "c", kt: "c", swift: "c", sh: "sh", bash: "sh", zsh: "sh", toml: "sh", yaml: "sh", yml: "sh", rb: "sh" };
const KEYWORD_SETS = Object.fromEntries(Object.entries(KEYWORDS).map(([k, v]) => [k, new Set(v.split(" "))]));
const TOKEN = /(\/\/.*$|#.*$|\/\*.*?\*\/|"(?:[^"\\]|\\.)*"?|'(?:[^'\\]|\\.)*'?|`(?:[^`\\]|\\.)*`?|\b\d[\d_.]*\b|[A-Za-z_][A-Za-z0-9_]*)/g;

function language(path) {
  const dot = path.lastIndexOf(".");
  return dot < 0 ? null : LANGS[path.slice(dot + 1).toLowerCase()] || null;
}

function highlight(text, lang, into) {
  if (!lang || text.length > 1000) { into.append(text); return; }
  const words = KEYWORD_SETS[lang];
  const hashComments = lang === "py" || lang === "sh";
  let last = 0;
  TOKEN.lastIndex = 0;
  let match;
  while ((match = TOKEN.exec(text))) {
    const token = match[0];
    let kind = null;
    if (token.startsWith("//") && !hashComments) kind = "c";
    else if (token.startsWith("#") && hashComments) kind = "c";
    else if (token.startsWith("/*") && !hashComments) kind = "c";
    else if (/^["'`]/.test(token)) kind = "s";
    else if (/^\d/.test(token)) kind = "n";
    else if (words.has(token)) kind = "k";
    if (kind === null) continue;
    if (match.index > last) into.append(text.slice(last, match.index));
    into.append(el("span", { class: `t-${kind}`, text: token }));
    last = match.index + token.length;
    if (kind === "c" && !token.startsWith("/*")) break;
  }
  if (last < text.length) into.append(text.slice(last));
}

// The patch of many files, split into one piece per file (by its `diff --git` header).
function splitPatch(patch) {
  const pieces = [];
  if (!patch) return pieces;
  let start = patch.startsWith("diff --git ") ? 0 : patch.indexOf("\ndiff --git ");
  while (start >= 0) {
    const from = patch[start] === "\n" ? start + 1 : start;
    const next = patch.indexOf("\ndiff --git ", from);
    pieces.push(patch.slice(from, next < 0 ? patch.length : next));
    start = next;
  }
  return pieces;
}

function pieceLines(piece) {
  const lines = piece.split("\n");
  const body = [];
  let inHunks = false;
  for (const line of lines) {
    if (line.startsWith("@@")) inHunks = true;
    if (inHunks) body.push(line);
  }
  if (body.length && body[body.length - 1] === "") body.pop();
  return body;
}

function unifiedRows(lines, lang, start, stop) {
  const rows = [];
  let oldNo = 0;
  let newNo = 0;
  for (let i = 0; i < lines.length && rows.length < stop; i++) {
    const line = lines[i];
    let cls = "ctx";
    let a = "";
    let b = "";
    if (line.startsWith("@@")) {
      const m = /@@ -(\d+)(?:,\d+)? \+(\d+)/.exec(line);
      if (m) { oldNo = +m[1]; newNo = +m[2]; }
      cls = "hunk";
    } else if (line.startsWith("+")) { cls = "add"; b = newNo++; }
    else if (line.startsWith("-")) { cls = "del"; a = oldNo++; }
    else if (line.startsWith("\\")) { cls = "meta"; }
    else { a = oldNo++; b = newNo++; }
    if (i < start) continue;
    const code = el("td", { class: "code" });
    if (cls === "hunk" || cls === "meta") code.textContent = line;
    else { code.append(el("span", { class: "sign", text: line[0] || " " })); highlight(line.slice(1), lang, code); }
    rows.push(el("tr", { class: cls }, el("td", { class: "ln", text: a }), el("td", { class: "ln", text: b }), code));
  }
  return rows;
}

function splitRows(lines, lang, start, stop) {
  const rows = [];
  let oldNo = 0;
  let newNo = 0;
  let dels = [];
  let adds = [];
  const cell = (text, no, cls) => {
    const code = el("td", { class: `code ${cls}` });
    if (text !== null) { code.append(el("span", { class: "sign", text: text[0] || " " })); highlight(text.slice(1), lang, code); }
    return [el("td", { class: `ln ${cls}`, text: no }), code];
  };
  const flush = () => {
    for (let j = 0; j < Math.max(dels.length, adds.length); j++) {
      const d = dels[j];
      const a = adds[j];
      rows.push(el("tr", {}, cell(d ? d[0] : null, d ? d[1] : "", d ? "del" : "none"), cell(a ? a[0] : null, a ? a[1] : "", a ? "add" : "none")));
    }
    dels = [];
    adds = [];
  };
  for (let i = 0; i < lines.length && rows.length < stop; i++) {
    const line = lines[i];
    if (line.startsWith("-")) { dels.push([line, oldNo++]); continue; }
    if (line.startsWith("+")) { adds.push([line, newNo++]); continue; }
    flush();
    if (i < start) {
      if (line.startsWith("@@")) { const m = /@@ -(\d+)(?:,\d+)? \+(\d+)/.exec(line); if (m) { oldNo = +m[1]; newNo = +m[2]; } }
      else if (!line.startsWith("\\")) { oldNo++; newNo++; }
      continue;
    }
    if (line.startsWith("@@")) {
      const m = /@@ -(\d+)(?:,\d+)? \+(\d+)/.exec(line);
      if (m) { oldNo = +m[1]; newNo = +m[2]; }
      rows.push(el("tr", { class: "hunk" }, el("td", { colspan: "4", class: "code", text: line })));
    } else if (line.startsWith("\\")) {
      rows.push(el("tr", { class: "meta" }, el("td", { colspan: "4", class: "code", text: line })));
    } else {
      rows.push(el("tr", { class: "ctx" }, cell(line, oldNo++, "ctx"), cell(line, newNo++, "ctx")));
    }
  }
  flush();
  return rows;
}

// A diff view of many files that stays fast: headers for every file at once, bodies only when a
// file scrolls into view, big files collapsed, long files shown a chunk at a time.
// Where a diff view's patch comes from: a whole patch at hand, or a loader asked for the files
// that come into view, a batch of paths at a time (a big turn's first screen needs only a few).
function patchSource(patch, load) {
  const known = new Map();
  const add = (text) => {
    for (const piece of splitPatch(text)) {
      const end = piece.indexOf("\n");
      const m = / b\/(.*)$/.exec(end < 0 ? piece : piece.slice(0, end));
      if (m) known.set(m[1], piece);
    }
  };
  if (patch) add(patch);
  let queue = [];
  let timer = null;
  const flush = () => {
    timer = null;
    const batch = queue.splice(0, 100);
    if (queue.length) timer = setTimeout(flush, 0);
    const paths = batch.flatMap(({ file }) => (file.old_path ? [file.path, file.old_path] : [file.path]));
    load(paths).then((text) => {
      add(text || "");
      for (const { file, resolve } of batch) resolve(known.get(file.path) || "");
    }, (error) => { for (const { reject } of batch) reject(error); });
  };
  return (file) => {
    if (known.has(file.path) || !load) return Promise.resolve(known.get(file.path) || "");
    return new Promise((resolve, reject) => {
      queue.push({ file, resolve, reject });
      if (!timer) timer = setTimeout(flush, 0);
    });
  };
}

// One listener for the screen's width, whatever the number of diffs drawn: each diff's
// callback lives as long as its list is in the page (a running turn's diff is redrawn often).
const narrowWatchers = new Map();
let narrowQuery = null;
function onNarrowChange(list, callback) {
  for (const [shown, watcher] of narrowWatchers) {  // forget the diffs that left the page
    if (shown.isConnected) watcher.attached = true;
    else if (watcher.attached) narrowWatchers.delete(shown);
  }
  narrowWatchers.set(list, { callback, attached: false });
  if (narrowQuery) return;
  narrowQuery = window.matchMedia(NARROW);
  narrowQuery.addEventListener("change", () => {
    for (const [shown, watcher] of narrowWatchers) {
      if (shown.isConnected) watcher.callback();
      else if (watcher.attached) narrowWatchers.delete(shown);
    }
  });
}

function diffView(files, source, options) {
  const pieceOf = patchSource(source.patch, source.load);
  let firstRows = options && options.onFirstRows;
  let mode = localStorage.getItem("turnback.diff-mode") || "unified";
  // Split needs two columns of code: on a narrow screen the diff is drawn unified, whatever
  // was chosen, and split again once the screen is wide enough.
  const narrow = window.matchMedia(NARROW);
  const drawnMode = () => (mode === "split" && narrow.matches ? "unified" : mode);
  const list = el("div", { class: "files-diff" });
  const observer = "IntersectionObserver" in window
    ? new IntersectionObserver((entries) => {
      for (const entry of entries) if (entry.isIntersecting) { observer.unobserve(entry.target); entry.target.fill(); }
    }, { rootMargin: "800px 0px" })
    : null;
  const build = (f, index) => {
    const size = (f.additions || 0) + (f.deletions || 0);
    let lines = null;  // the file's diff lines, once its piece of the patch is here
    const body = el("div", { class: "file-body" });
    let shown = 0;
    let filled = false;
    const label = f.old_path ? `${f.old_path} → ${f.path}` : f.path;
    const toggle = el("button", { type: "button", class: "collapse ghost", "aria-expanded": "true", title: "Collapse or expand (x)", text: "▾" });
    const section = el("section", { class: "file", id: `file-${index}`, tabindex: "0", "data-path": f.path },
      el("header", { class: "file-head" }, toggle,
        el("span", { class: `kind k-${f.kind}`, title: f.kind, text: KIND_LETTERS[f.kind] || "?" }),
        el("span", { class: "path mono", title: label, text: label }),
        f.binary ? el("span", { class: "muted small", text: "binary" }) : counts([f])),
      body);
    const more = () => {
      const table = body.querySelector("table") || body.appendChild(el("table", { class: `diff ${drawnMode()}` }));
      const rows = drawnMode() === "split" ? splitRows(lines, language(f.path), shown, CHUNK) : unifiedRows(lines, language(f.path), shown, CHUNK);
      const tbody = el("tbody", {}, rows);
      table.append(tbody);
      shown += CHUNK;
      if (firstRows) { firstRows(); firstRows = null; }
      const old = body.querySelector(".more");
      if (old) old.remove();
      if (shown < lines.length) body.append(el("button", { type: "button", class: "more", onclick: more, text: `Show more (${lines.length - shown} lines left)` }));
    };
    section.fill = () => {
      if (filled) return;
      filled = true;
      shown = 0;
      if (f.binary) { body.replaceChildren(el("p", { class: "muted pad", text: "Binary file: no text to show." })); return; }
      if (lines === null) {
        if (!body.querySelector(".placeholder")) body.replaceChildren(el("p", { class: "muted pad", text: "Loading…" }));
        pieceOf(f).then((piece) => {
          lines = pieceLines(piece);
          filled = false;
          if (!section.classList.contains("collapsed")) section.fill();
        }, (error) => { body.replaceChildren(problem(error)); });
        return;
      }
      body.replaceChildren();
      if (!lines.length) { body.append(el("p", { class: "muted pad", text: f.kind === "renamed" ? "Renamed without changes." : "No text changes." })); return; }
      more();
    };
    section.redraw = () => { filled = false; if (!section.classList.contains("collapsed")) section.fill(); };
    const collapse = (yes) => {
      section.classList.toggle("collapsed", yes);
      toggle.setAttribute("aria-expanded", String(!yes));
      toggle.textContent = yes ? "▸" : "▾";
      if (!yes) section.fill();
    };
    section.collapse = collapse;
    toggle.addEventListener("click", () => collapse(!section.classList.contains("collapsed")));
    if (size > COLLAPSE_OVER) {
      section.classList.add("collapsed");
      toggle.textContent = "▸";
      toggle.setAttribute("aria-expanded", "false");
      body.append(el("button", { type: "button", class: "more", onclick: () => collapse(false), text: `Large diff: show ${size} changed lines` }));
      body.classList.add("teaser");
    } else {
      const placeholder = el("div", { class: "placeholder" });
      placeholder.style.height = `${Math.min(size + 2, CHUNK) * 20 + 8}px`;
      body.append(placeholder);
      if (index < 12 || !observer) section.fill();
      else observer.observe(section);
    }
    return section;
  };
  // Files are built a batch at a time: the first screen is drawn before the rest exist.
  const sections = [];
  let query = "";  // the filter by path, lower case
  const fits = (f) => !query || f.path.toLowerCase().includes(query) || (f.old_path || "").toLowerCase().includes(query);
  let wanted = null;  // "Collapse all" or "Expand all", for the files not built yet
  const grow = (upTo) => {
    const end = Math.min(files.length, upTo);
    if (sections.length >= end) return;
    const batch = document.createDocumentFragment();
    while (sections.length < end) {
      const section = build(files[sections.length], sections.length);
      if (wanted !== null) section.collapse(wanted);
      section.hidden = !fits(files[sections.length]);
      sections.push(section);
      batch.append(section);
    }
    list.append(batch);
  };
  const growLater = () => {
    grow(sections.length + 200);
    if (sections.length < files.length) setTimeout(growLater, 0);
  };
  grow(40);
  // The rest is built once the first screen is drawn (or after a moment), not before it.
  let started = false;
  const startGrowing = () => { if (!started && sections.length < files.length) { started = true; setTimeout(growLater, 0); } };
  const drawn = firstRows;
  firstRows = () => { if (drawn) drawn(); startGrowing(); };
  setTimeout(startGrowing, 500);
  const all = (collapsed) => { wanted = collapsed; sections.forEach((s) => s.collapse(collapsed)); };
  const reveal = (i) => { grow(i + 1); sections[i].collapse(false); sections[i].scrollIntoView(); sections[i].focus(); };
  const showMode = () => {
    const now = drawnMode();
    unifiedButton.classList.toggle("on", now === "unified");
    splitButton.classList.toggle("on", now === "split");
    unifiedButton.setAttribute("aria-pressed", String(now === "unified"));
    splitButton.setAttribute("aria-pressed", String(now === "split"));
    splitButton.disabled = narrow.matches;
    splitButton.title = narrow.matches ? "Too narrow a screen for split: the diff is unified" : "Old and new side by side (s)";
  };
  const setMode = (next) => {
    mode = next;
    localStorage.setItem("turnback.diff-mode", mode);
    showMode();
    for (const s of sections) if (s.querySelector("table")) s.redraw();
  };
  const unifiedButton = el("button", { type: "button", onclick: () => setMode("unified"), text: "Unified" });
  const splitButton = el("button", { type: "button", onclick: () => setMode("split"), text: "Split" });
  showMode();
  onNarrowChange(list, () => {
    showMode();
    if (mode === "split") for (const s of sections) if (s.querySelector("table")) s.redraw();
  });
  const toolbar = el("div", { class: "diff-toolbar" },
    el("strong", { text: `${files.length} file${files.length === 1 ? "" : "s"} ` }), counts(files),
    el("span", { class: "spacer" }),
    el("span", { class: "segmented" }, unifiedButton, splitButton),
    el("button", { type: "button", onclick: () => all(true), text: "Collapse all" }),
    el("button", { type: "button", onclick: () => all(false), text: "Expand all" }));
  // The index of files, by folder, is drawn when first opened: a long one costs nothing until
  // wanted. The filter narrows it and the diffs below alike.
  const entries = () => {
    const folders = new Map();
    files.forEach((f, i) => {
      if (!fits(f)) return;
      const cut = f.path.lastIndexOf("/");
      const folder = cut < 0 ? "" : f.path.slice(0, cut + 1);
      if (!folders.has(folder)) folders.set(folder, []);
      folders.get(folder).push(el("li", {}, el("a", { href: `#file-${i}`, onclick: (e) => { e.preventDefault(); reveal(i); } },
        el("b", { class: `k-${f.kind}`, text: KIND_LETTERS[f.kind] }), " ", f.path.slice(cut + 1)), " ", f.binary ? "" : el("span", { class: "muted", text: `+${f.additions} −${f.deletions}` })));
    });
    if (!folders.size) return el("p", { class: "muted", text: "No file's path contains that." });
    return el("ul", { class: "tree mono small", "aria-label": "Changed files by folder" }, [...folders].sort(([a], [b]) => a.localeCompare(b)).map(([folder, items]) =>
      el("li", {}, el("span", { class: "folder", text: `${folder || "./"} (${items.length})` }), el("ol", { "aria-label": folder || "./" }, items))));
  };
  const index = files.length > 1 ? el("details", { class: "file-index", open: files.length <= 30 },
    el("summary", { text: `Files (${files.length})` }), files.length <= 30 ? entries() : null) : null;
  const redrawIndex = () => {
    if (!index || !index.open) return;
    const old = index.querySelector(".tree, p");
    if (old) old.replaceWith(entries()); else index.append(entries());
  };
  if (index && files.length > 30) index.addEventListener("toggle", () => { if (index.open && !index.querySelector(".tree, p")) index.append(entries()); });
  const filterCount = el("span", { class: "muted small", role: "status" });
  const filterBox = files.length > 1 ? el("input", { type: "search", placeholder: "filter by path", "aria-label": "Show only files whose path contains", oninput: () => {
    query = filterBox.value.trim().toLowerCase();
    grow(files.length);  // the filter reaches the files not built yet
    sections.forEach((s, i) => { s.hidden = !fits(files[i]); });
    const shownCount = query ? files.filter(fits).length : files.length;
    filterCount.textContent = query ? `${shownCount} of ${files.length} files` : "";
    redrawIndex();
  } }) : null;
  if (filterBox) toolbar.insertBefore(el("span", { class: "field" }, filterBox, filterCount), toolbar.querySelector(".spacer"));
  const view = el("div", { class: "diff-view" }, toolbar, options && options.note ? options.note : null, index, list);
  view.setMode = setMode;
  view.toggleMode = () => setMode(mode === "unified" ? "split" : "unified");
  return view;
}

function diffKeys() {
  return [
    [["n", "j"], "next file", () => moveFocus("section.file:not([hidden])", 1)],
    [["p", "k"], "previous file", () => moveFocus("section.file:not([hidden])", -1)],
    [["x"], "collapse or expand the focused file", () => { const s = document.activeElement.closest("section.file"); if (s) s.collapse(!s.classList.contains("collapsed")); }],
    [["s"], "unified or split", () => { const v = document.querySelector(".diff-view"); if (v) v.toggleMode(); }],
  ];
}

// -- page: one turn ---------------------------------------------------------------------------

async function turnPage(sessionId, ref) {
  // The diff is asked for at once, beside the conversation: on a big turn it is the slow part.
  const asked = Promise.all([
    api(`/api/sessions/${sessionId}/turns/${ref}`),
    api(`/api/sessions/${sessionId}`),
  ]);
  const stat = api(`/api/sessions/${sessionId}/turns/${ref}/diff?stat=1`).catch((error) => error);
  const [shown, summary] = await asked;
  // A running turn's whole patch comes in one answer (the server answers both from one capture
  // of the workspace), not its files' pieces one request and capture at a time.
  const pending = shown.turn.status === "running"
    ? stat.then(() => api(`/api/sessions/${sessionId}/turns/${ref}/diff`)).catch((error) => error)
    : stat;
  const turn = shown.turn;
  const name = sessionName(summary.session, summary.first_prompt);
  document.title = `turnback · turn ${turn.number} · ${name}`;
  setCrumbs(el("a", { href: "/", text: "sessions" }), el("a", { href: `/sessions/${sessionId}`, text: name }), el("span", { text: `turn ${turn.number}` }));
  const chain = summary.conversation;
  const at = chain.indexOf(turn.number);
  const inChain = at >= 0 && turn.status !== "set_aside";
  const prev = inChain && at > 0 ? chain[at - 1] : null;
  const next = inChain && at < chain.length - 1 ? chain[at + 1] : null;
  const talk = el("div", { class: "conversation", "aria-live": turn.status === "running" ? "polite" : null }, conversation(shown));
  const diffPane = el("div", { class: "diff-pane" }, el("p", { class: "muted", text: "Loading the diff…" }));
  main.replaceChildren(el("section", { class: "turn" },
    el("div", { class: "turn-head" },
      el("div", { class: "line" }, el("h1", { text: `Turn ${turn.number}` }), badge(turn.status), !inChain && turn.status !== "running" && turn.status !== "set_aside" ? badge("reverted", "reverted") : null,
        el("span", { class: "muted small", title: exact(turn.started_at), text: when(turn.started_at) }),
        el("span", { class: "spacer" }),
        prev ? el("a", { class: "button", href: `/sessions/${sessionId}/turns/${prev}`, title: "Previous turn ([)", text: `← #${prev}` }) : null,
        next ? el("a", { class: "button", href: `/sessions/${sessionId}/turns/${next}`, title: "Next turn (])", text: `#${next} →` }) : null),
      el("p", { class: "prompt-full", title: promptText(turn.prompt), text: promptText(turn.prompt) }),
      turn.detail ? el("div", { class: "detail", text: turn.detail }) : null),
    el("div", { class: "columns" },
      el("aside", { class: "talk-pane", "aria-label": "Conversation" }, el("h2", { text: "Conversation" }), talk),
      el("div", { class: "diff-col", "aria-label": "Diff" }, el("h2", { text: "Changes" }), diffPane))));
  // A running turn's diff is the workspace now against the turn's beginning: it is asked for
  // again every REFRESH ms while the page is in view (each answer is a capture of the
  // workspace, so no more often than that), and redrawn when it changed.
  const running = turn.status === "running";
  const refreshed = el("time", {});
  let lastPatch = null;
  const showDiff = (diff) => {
    const note = el("div", {},
      running ? el("p", { class: "note running-note" }, el("strong", { text: "The turn is still running: " }), "this is its diff so far, against the workspace as it was when last refreshed (", refreshed, ", every 2 s).") : null,
      diff.outside.length ? el("p", { class: "note" }, el("strong", { text: `${diff.outside.length} file${diff.outside.length === 1 ? "" : "s"} changed outside any turn` }), ` before this turn (not the agent's): ${diff.outside.slice(0, 5).map((f) => f.path).join(", ")}${diff.outside.length > 5 ? ", …" : ""}`) : null);
    if (!diff.available && !running) diffPane.replaceChildren(el("p", { class: "problem" }, "This turn has no workspace checkpoint at its beginning or end (the capture failed, was skipped or pruned), so its diff is unavailable. The session's activities say why."));
    else if (!diff.files.length) diffPane.replaceChildren(note, el("p", { class: "muted", text: running ? "No file has changed yet." : "This turn changed no files." }));
    else {
      const load = (paths) => api(`/api/sessions/${sessionId}/turns/${turn.token}/patch?${paths.map((p) => `path=${encodeURIComponent(p)}`).join("&")}`).then((r) => r.patch);
      const onFirstRows = () => requestAnimationFrame(() => performance.mark("turnback:first-screen"));
      diffPane.replaceChildren(diffView(diff.files, running ? { patch: diff.patch } : { load }, { note, onFirstRows }));
    }
  };
  const stamp = () => {
    const now = new Date();
    refreshed.dateTime = now.toISOString();
    refreshed.textContent = now.toLocaleTimeString();
  };
  try {
    const diff = await pending;
    if (diff instanceof Error) throw diff;
    lastPatch = diff.patch;
    stamp();
    showDiff(diff);
  } catch (error) { diffPane.replaceChildren(problem(error)); }
  if (running) {
    const refresh = async () => {
      if (document.visibilityState === "visible") {
        try {
          const diff = await api(`/api/sessions/${sessionId}/turns/${turn.token}/diff`);
          if (diff.turn.status !== "running") return;  // it ended: the stream reloads the page
          stamp();
          if (diff.patch !== lastPatch) {
            lastPatch = diff.patch;
            const y = window.scrollY;
            showDiff(diff);
            window.scrollTo(0, y);
          }
        } catch (error) { /* the next round tries again; the page keeps what it has */ }
      }
      setTimeout(refresh, REFRESH);
    };
    setTimeout(refresh, REFRESH);
  }
  rescuePoints(sessionId, turn).then((box) => { if (box) main.querySelector("aside.talk-pane").append(box); })
    .catch(() => { /* a turn without tool checkpoints, or none on this host: nothing to offer */ });
  listen(sessionId, {
    running: (data) => { if (data.turn.token === turn.token) talk.replaceChildren(...conversation({ messages: data.messages, events: [] })); },
    log: () => { if (turn.status === "running") location.reload(); },
  });
  bindKeys([
    ...diffKeys(),
    [["["], "previous turn", () => { if (prev) location.href = `/sessions/${sessionId}/turns/${prev}`; }],
    [["]"], "next turn", () => { if (next) location.href = `/sessions/${sessionId}/turns/${next}`; }],
    [["u", "t"], "back to the timeline", () => { location.href = `/sessions/${sessionId}`; }],
  ]);
}

// A terminal agent's turn has a checkpoint before each shell or write tool: any file can be
// brought back as it was before one (`turnback rescue`), and the last rescue undone.
async function rescuePoints(sessionId, turn) {
  const found = await api(`/api/sessions/${sessionId}/turns/${turn.number}/points`);
  if (!found.tools.length) return null;
  const point = (number, what) => el("li", { class: "point" },
    el("span", { class: "small", text: number ? `Before tool ${number}: ` : "When the turn began" }),
    number ? el("code", { class: "small", text: what }) : null,
    CONFIG.readOnly ? null : el("button", { type: "button", class: "small", onclick: () => rescueDialog(sessionId, turn, number, what), text: "Bring files back…" }));
  return el("section", { class: "points", "aria-label": "Checkpoints before tools" },
    el("h2", { text: "Checkpoints before tools" }),
    el("ol", { class: "point-list" }, point(0, ""), found.tools.map((t) => point(t.number, t.summary))),
    CONFIG.readOnly ? null : el("button", { type: "button", class: "small", onclick: () => undoRescue(sessionId), text: "Undo the last rescue" }));
}

function rescueDialog(sessionId, turn, number, what) {
  const paths = el("textarea", { name: "paths", rows: 3, "aria-label": "Paths to bring back" });
  const force = el("input", { type: "checkbox", name: "force" });
  const result = el("div", { class: "result" });
  const go = el("button", { type: "button", class: "danger", text: "Bring them back" });
  const where = number ? `just before tool ${number} (${what})` : "when the turn began";
  const dialog = el("div", { class: "dialog", role: "dialog", "aria-label": "Bring files back" },
    el("h2", { text: `Bring files back as they were ${where}` }),
    el("p", { class: "muted", text: "Files or folders of the workspace, one per line (untracked files too). Only these are written; “Undo the last rescue” puts them back." }),
    paths,
    el("label", { class: "choice" }, force, "Overwrite my edits made since the turn ended"),
    result,
    el("div", { class: "buttons" }, el("button", { type: "button", onclick: closeOverlay, text: "Cancel" }), go));
  go.addEventListener("click", async () => {
    const wanted = paths.value.split("\n").map((p) => p.trim()).filter(Boolean);
    if (!wanted.length) { result.replaceChildren(el("p", { class: "problem", text: "Name at least one path." })); return; }
    go.disabled = true;
    try {
      const done = await api(`/api/sessions/${sessionId}/rescue`, { turn: turn.number, before_tool: number, paths: wanted, force: force.checked });
      closeOverlay();
      toast(`Brought back ${done.written.join(", ")} (rescue ${done.id}). “Undo the last rescue” puts them back.`, "good");
    } catch (error) {
      result.replaceChildren(problem(error));
      go.disabled = false;
    }
  });
  openOverlay(dialog);
  paths.focus();
}

async function undoRescue(sessionId) {
  if (!confirm("Put the paths of the last rescue back as they were just before it?")) return;
  try {
    const done = await api(`/api/sessions/${sessionId}/rescue`, { undo: true });
    toast(`Undid rescue ${done.id}: ${done.written.join(", ")} as before it.`, "good");
  } catch (error) { toast(`${error.message}. ${error.hint}`, "bad"); }
}

// -- page: a range of turns --------------------------------------------------------------------

async function rangePage(sessionId) {
  const query = new URLSearchParams(location.search);
  const from = query.get("from");
  const to = query.get("to");
  const pending = api(`/api/sessions/${sessionId}/range?from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}`).catch((error) => error);
  const summary = await api(`/api/sessions/${sessionId}`);
  const name = sessionName(summary.session, summary.first_prompt);
  setCrumbs(el("a", { href: "/", text: "sessions" }), el("a", { href: `/sessions/${sessionId}`, text: name }), el("span", { text: `turns ${from}→${to}` }));
  document.title = `turnback · ${from}→${to} · ${name}`;
  const pane = el("div", {}, el("p", { class: "muted", text: "Loading…" }));
  main.replaceChildren(el("section", { class: "range-page" },
    el("h1", { text: +from === 0 ? `Everything up to the end of turn ${to}` : `From the end of turn ${from} to the end of turn ${to}` }),
    el("div", { class: "line range-head" },
      el("p", { class: "muted", text: "The agent's turns and any edits made by hand in between, together." }),
      el("span", { class: "spacer" }),
      CONFIG.readOnly ? null : el("button", { type: "button", onclick: markSeen, text: `Mark everything up to turn ${to} reviewed` })),
    pane));
  async function markSeen(event) {
    try {
      await api(`/api/sessions/${sessionId}/review-mark`, { turn: +to });
      event.target.disabled = true;
      toast(`Marked everything up to turn ${to} as reviewed.`, "good");
    } catch (error) { toast(`${error.message}. ${error.hint}`, "bad"); }
  }
  try {
    const diff = await pending;
    if (diff instanceof Error) throw diff;
    pane.replaceChildren(diff.files.length ? diffView(diff.files, { patch: diff.patch }) : el("p", { class: "muted", text: "Nothing changed in this range." }));
  } catch (error) { pane.replaceChildren(problem(error)); }
  bindKeys([...diffKeys(), [["u", "t"], "back to the timeline", () => { location.href = `/sessions/${sessionId}`; }]]);
}

// -- routing --------------------------------------------------------------------------------

async function route() {
  const path = location.pathname;
  let m;
  try {
    await login();
    if (path === "/") await sessionsPage();
    else if ((m = /^\/sessions\/([0-9a-fA-F]+)$/.exec(path))) await timelinePage(m[1]);
    else if ((m = /^\/sessions\/([0-9a-fA-F]+)\/turns\/([0-9a-fA-F]+)$/.exec(path))) await turnPage(m[1], m[2]);
    else if ((m = /^\/sessions\/([0-9a-fA-F]+)\/range$/.exec(path))) await rangePage(m[1]);
    else throw new ApiError(404, { error: { message: `there is no page at ${path}`, hint: "Go back to the list of sessions." } });
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    if (error.status === 401 || error.status === 403) {
      localStorage.removeItem(KEY);
      main.replaceChildren(el("section", {}, el("h1", { text: "No access" }), problem(error)));
    } else main.replaceChildren(el("section", {}, el("h1", { text: "This page cannot be shown" }), problem(error), el("p", {}, el("a", { href: "/", text: "← All sessions" }))));
  }
  document.body.dataset.ready = "1";
}

route();
