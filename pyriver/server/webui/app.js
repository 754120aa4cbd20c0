// pyriver's chat page: a client of the server's own OpenAI endpoints (POST /v1/chat/completions
// with stream: true), plus GET /river for how the server runs River. With "river_tokens": true a
// streamed chunk's choice carries "river": {"exits": [...], "n_layer": N}: the exit block of each
// token of that chunk, which the page colours. Conversations live in localStorage. No dependencies.
// On a router (`pyriver serve --models-dir`: GET /props says role "router") the page lists GET
// /v1/models in a picker and names the chosen model in every request (?model= on GETs, "model" in
// bodies), as llama-server's router routes them; a model not loaded yet loads on that first request.
"use strict";

const STORE = "pyriver.webui.v1";
const KEY_STORE = "pyriver.webui.key";
const MODEL_STORE = "pyriver.webui.model";
const DEFAULTS = { system: "", temperature: 0.7, max_tokens: 512, top_p: 0.95, river: true };

const $ = (id) => document.getElementById(id);
const uid = () => Date.now().toString(36) + Math.random().toString(36).slice(2, 8);

let state = loadState();
let server = null;       // GET /river: model, n_layer, river settings
let models = null;       // a router's models (GET /v1/models ids); null on a one-model server
let busy = null;         // the answer being streamed: {controller, conv, msg}
let drawPending = false;

class AuthError extends Error {}

// ---------------------------------------------------------------- storage
function loadState() {
  try {
    const s = JSON.parse(localStorage.getItem(STORE));
    if (s && Array.isArray(s.convs)) return s;
  } catch (e) { /* a broken store starts afresh */ }
  return { convs: [], current: null };
}

function saveState() {
  try { localStorage.setItem(STORE, JSON.stringify(state)); }
  catch (e) { setStatus("Could not save the conversations: " + e.message); }
}

function newConv() {
  const prev = currentConv();
  const conv = { id: uid(), title: "New chat", messages: [],
                 settings: Object.assign({}, DEFAULTS, prev ? prev.settings : {}) };
  state.convs.unshift(conv);
  state.current = conv.id;
  saveState();
  return conv;
}

function currentConv() {
  return state.convs.find((c) => c.id === state.current) || null;
}

// ---------------------------------------------------------------- HTTP
function apiKey() { return localStorage.getItem(KEY_STORE) || ""; }

function headers() {
  const h = { "Content-Type": "application/json" };
  if (apiKey()) h.Authorization = "Bearer " + apiKey();
  return h;
}

async function errorText(resp) {
  try {
    const j = await resp.json();
    return (j.error && j.error.message) || JSON.stringify(j);
  } catch (e) { return resp.status + " " + resp.statusText; }
}

// The model a router's requests name: the one picked last, while the router still lists it.
function chosenModel() {
  const m = localStorage.getItem(MODEL_STORE);
  return models.includes(m) ? m : models[0];
}

async function loadModels() {
  const resp = await fetch("/props", { headers: headers() });
  if (resp.status === 401) throw new AuthError(await errorText(resp));
  models = null;
  if (!resp.ok || (await resp.json()).role !== "router") return;   // one model (or it is still loading)
  const list = await fetch("/v1/models", { headers: headers() });
  if (!list.ok) throw new Error(await errorText(list));
  models = (await list.json()).data.map((m) => m.id);
  if (!models.length) throw new Error("the server lists no models");
}

async function loadServer() {
  if (models) setStatus("Loading " + chosenModel() + "…");   // a router loads the model on this request
  const url = models ? "/river?model=" + encodeURIComponent(chosenModel()) : "/river";
  const resp = await fetch(url, { headers: headers() });
  if (resp.status === 401) throw new AuthError(await errorText(resp));
  if (resp.status === 503) {   // the model is still loading
    setStatus("The model is loading…");
    await new Promise((r) => setTimeout(r, 1000));
    return loadServer();
  }
  if (!resp.ok) throw new Error(await errorText(resp));
  server = await resp.json();
  setStatus("");
  showServer();
}

function askKey(message) {
  const dlg = $("key-dialog");
  $("key-error").textContent = message || "";
  $("key-input").value = "";
  if (!dlg.open) dlg.showModal();
  $("key-input").focus();
  return new Promise((resolve) => { dlg.resolveKey = resolve; });
}

async function connect() {
  for (;;) {
    try { await loadModels(); await loadServer(); return; }
    catch (e) {
      if (e instanceof AuthError) {
        await askKey(apiKey() ? "The server refused this key." : "");
      } else {
        setStatus("Cannot reach the server: " + e.message);
        return;
      }
    }
  }
}

// ---------------------------------------------------------------- streaming
function requestBody(conv) {
  const s = conv.settings;
  const msgs = [];
  if (s.system.trim()) msgs.push({ role: "system", content: s.system });
  for (const m of conv.messages) {
    if (m.role === "user" || (m.role === "assistant" && m.content)) msgs.push({ role: m.role, content: m.content });
  }
  const body = { messages: msgs, stream: true, stream_options: { include_usage: true },
                 temperature: s.temperature, max_tokens: s.max_tokens, top_p: s.top_p, river_tokens: !!s.river };
  if (models) body.model = chosenModel();
  return body;
}

async function run(conv) {
  const msg = { role: "assistant", content: "", chunks: [], river: null, usage: null };
  const body = requestBody(conv);
  conv.messages.push(msg);
  const controller = new AbortController();
  busy = { controller, conv, msg };
  showBusy(true);
  renderMessages();
  const t = { start: performance.now(), first: null, end: null };
  try {
    const resp = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(body), signal: controller.signal });
    if (resp.status === 401) {
      msg.error = "The server wants an API key.";
      askKey(apiKey() ? "The server refused this key." : "").then(() => setStatus("Key saved: regenerate to try again."));
      return;
    }
    if (!resp.ok) { msg.error = await errorText(resp); return; }
    await readEvents(resp, (ch) => {
      if (ch.usage) msg.usage = ch.usage;
      if (ch.river !== undefined) msg.river = ch.river;
      const c = ch.choices && ch.choices[0];
      if (!c) return;
      // a thinking model's reasoning comes apart (llama-server's delta.reasoning_content): shown folded
      const thought = (c.delta && c.delta.reasoning_content) || "";
      if (thought) {
        if (t.first === null) t.first = performance.now();
        msg.reasoning = (msg.reasoning || "") + thought;
        scheduleDraw();
      }
      const text = (c.delta && c.delta.content) || "";
      if (text) {
        if (t.first === null) t.first = performance.now();
        msg.content += text;
        msg.chunks.push([text, c.river ? c.river.exits : null]);
        if (c.river) msg.n_layer = c.river.n_layer;
        scheduleDraw();
      }
      if (c.finish_reason) msg.finish = c.finish_reason;
    });
  } catch (e) {
    if (e.name === "AbortError") msg.stopped = true;
    else msg.error = e.message;
  } finally {
    t.end = performance.now();
    msg.summary = summarize(msg, t);
    busy = null;
    showBusy(false);
    if (conv.title === "New chat") titleFrom(conv);
    saveState();
    renderList();
    renderMessages();
    setStatus(msg.error ? "Error: " + msg.error : msg.stopped ? "Stopped." : "Answer complete.");
    if (msg.content) $("announce").textContent = "pyriver: " + msg.content;
  }
}

// Server-sent events: "data: {json}" blocks split by blank lines, ending with "data: [DONE]".
async function readEvents(resp, onChunk) {
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of block.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") return;
        const ch = JSON.parse(data);
        if (ch.error) throw new Error(ch.error.message || "the server sent an error");
        onChunk(ch);
      }
    }
  }
}

function summarize(msg, t) {
  const exits = [];
  for (const [, e] of msg.chunks) if (e) exits.push(...e);
  const tokens = msg.usage ? msg.usage.completion_tokens : (exits.length || null);
  const s = { tokens };
  if (tokens > 1 && t.first !== null && t.end > t.first) s.tok_s = (tokens - 1) / ((t.end - t.first) / 1000);
  const r = msg.river;
  if (r && r.mean_exit_layer !== null && r.mean_exit_layer !== undefined) {
    s.mean_exit = r.mean_exit_layer;
    s.work_share = r.river_work_share;
  } else if (exits.length > 1 && msg.n_layer) {
    // a stopped answer has no final chunk: the same figures from the exits seen (the first token
    // comes from the prompt at full depth, so it is left out as the server leaves it out)
    const dec = exits.slice(1);
    s.mean_exit = dec.reduce((a, b) => a + b, 0) / dec.length;
    s.work_share = dec.reduce((a, e) => a + (msg.n_layer - 1 - e), 0) / (dec.length * msg.n_layer);
  }
  if (r && r.lossless) s.lossless = { accepted: r.lossless.accepted, drafted: r.lossless.drafted };
  return s;
}

function titleFrom(conv) {
  const first = conv.messages.find((m) => m.role === "user");
  if (first) conv.title = first.content.trim().split("\n")[0].slice(0, 48) || "New chat";
}

// ---------------------------------------------------------------- Markdown (escape first)
function esc(s) {
  return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
          .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
}

function inline(text) {
  // code spans first, so nothing inside them is formatted
  return esc(text).split(/(`[^`\n]+`)/).map((part, i) => {
    if (i % 2) return "<code>" + part.slice(1, -1) + "</code>";
    return part
      .replace(/\[([^\]\n]+)\]\((https?:\/\/[^\s)]+)\)/g,
               '<a href="$2" target="_blank" rel="noopener noreferrer">$1</a>')
      .replace(/\*\*([^*\n]+)\*\*/g, "<strong>$1</strong>")
      .replace(/__([^_\n]+)__/g, "<strong>$1</strong>")
      .replace(/(^|[^*\w])\*([^*\s][^*\n]*?)\*(?!\w)/g, "$1<em>$2</em>")
      .replace(/(^|[^_\w])_([^_\s][^_\n]*?)_(?!\w)/g, "$1<em>$2</em>");
  }).join("");
}

function codeBlock(lang, code) {
  const l = (lang.match(/^[\w+#.-]{1,20}$/) || [""])[0];
  return '<div class="code"><div class="code-head"><span>' + esc(l || "code") + "</span>" +
         '<button type="button" class="copy-code small" aria-label="Copy the code">Copy</button></div>' +
         "<pre><code>" + esc(code) + "</code></pre></div>";
}

function markdown(src) {
  const lines = src.replace(/\r\n?/g, "\n").split("\n");
  const out = [];
  let para = [];
  const flush = () => { if (para.length) out.push("<p>" + para.map(inline).join("<br>") + "</p>"); para = []; };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    let m;
    if ((m = line.match(/^\s*```\s*([^`\s]*)\s*$/))) {
      flush();
      const code = [];
      for (i++; i < lines.length && !/^\s*```\s*$/.test(lines[i]); i++) code.push(lines[i]);
      out.push(codeBlock(m[1], code.join("\n")));   // an unclosed fence (still streaming) runs to the end
    } else if ((m = line.match(/^(#{1,6})\s+(.*)$/))) {
      flush();
      const n = m[1].length;
      out.push("<h" + n + ">" + inline(m[2]) + "</h" + n + ">");
    } else if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
      flush();
      out.push("<hr>");
    } else if (/^\s*>/.test(line)) {
      flush();
      const q = [];
      for (; i < lines.length && /^\s*>/.test(lines[i]); i++) q.push(lines[i].replace(/^\s*>\s?/, ""));
      i--;
      out.push("<blockquote>" + markdown(q.join("\n")) + "</blockquote>");
    } else if ((m = line.match(/^\s*([-*+]|\d+[.)])\s+/))) {
      flush();
      const ordered = /\d/.test(m[1]);
      const items = [];
      for (; i < lines.length; i++) {
        const it = lines[i].match(/^\s*([-*+]|\d+[.)])\s+(.*)$/);
        if (it && /\d/.test(it[1]) === ordered) items.push(it[2]);
        else if (items.length && /^\s{2,}\S/.test(lines[i])) items[items.length - 1] += " " + lines[i].trim();
        else break;
      }
      i--;
      const start = ordered && parseInt(m[1], 10) !== 1 ? ' start="' + parseInt(m[1], 10) + '"' : "";
      out.push((ordered ? "<ol" + start + ">" : "<ul>") + items.map((x) => "<li>" + inline(x) + "</li>").join("") +
               (ordered ? "</ol>" : "</ul>"));
    } else if (!line.trim()) {
      flush();
    } else {
      para.push(line);
    }
  }
  flush();
  return out.join("");
}

// ---------------------------------------------------------------- exit colours
function exitRange() {
  const n = server ? server.n_layer : 1;
  const lo = server && server.river.min_exit_layer !== null ? server.river.min_exit_layer : 0;
  return [Math.min(lo, n - 1), n - 1];
}

// f = 0: left at the earliest block allowed; f = 1: full depth (no colour, as a plain token)
function exitColour(f) {
  if (f >= 1) return "";
  const hue = 175 - 135 * f, light = 62 + 22 * f;
  return "hsl(" + hue.toFixed(0) + " 70% " + light.toFixed(0) + "%)";
}

function tokensView(msg) {
  const [lo, full] = exitRange();
  const frag = document.createDocumentFragment();
  for (const [text, exits] of msg.chunks) {
    const span = document.createElement("span");
    span.textContent = text;
    if (exits && exits.length) {
      const mean = exits.reduce((a, b) => a + b, 0) / exits.length;
      const f = full > lo ? Math.max(0, Math.min(1, (mean - lo) / (full - lo))) : 1;
      span.className = "tok" + (f >= 1 ? " full" : "");
      span.style.backgroundColor = exitColour(f);
      span.dataset.exit = exits.join(",");
      span.title = exits.map((e) => e >= full ? "full depth (block " + (e + 1) + " of " + (full + 1) + ")"
        : "left after block " + (e + 1) + " of " + (full + 1)).join("\n");
    }
    frag.appendChild(span);
  }
  return frag;
}

function hasExits(msg) {
  return !!(msg.chunks && msg.chunks.some(([, e]) => e && e.length));
}

// ---------------------------------------------------------------- rendering
function button(label, cls, onClick, aria) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  if (cls) b.className = cls;
  if (aria) b.setAttribute("aria-label", aria);
  b.addEventListener("click", onClick);
  return b;
}

function summaryText(s) {
  const parts = [];
  if (s.tokens) parts.push(s.tokens + " tokens");
  if (s.tok_s) parts.push(s.tok_s.toFixed(1) + " tok/s");
  if (s.mean_exit !== undefined && server) {
    parts.push("mean exit block " + (s.mean_exit + 1).toFixed(1) + " of " + server.n_layer);
    parts.push("river work " + (100 * s.work_share).toFixed(0) + "%");
  }
  if (s.lossless) parts.push("lossless: drafts kept " + s.lossless.accepted + " of " + s.lossless.drafted);
  return parts.join(" · ");
}

function messageBody(msg, conv) {
  const body = document.createElement("div");
  const exitsView = msg.role === "assistant" && hasExits(msg) && (msg.view ? msg.view === "exits" : conv.settings.river);
  if (exitsView) {
    body.className = "msg-body tokens";
    body.appendChild(tokensView(msg));
  } else if (msg.role === "assistant") {
    body.className = "msg-body markdown";
    body.innerHTML = markdown(msg.content);   // markdown() escapes every piece of text it emits
  } else {
    body.className = "msg-body plain";
    body.textContent = msg.content;
  }
  if (busy && busy.msg === msg && !msg.content) body.innerHTML = '<span class="typing">…</span>';
  return body;
}

// The answer's reasoning, apart from its text: open while the model still thinks, folded after.
function thinkingEl(msg) {
  const d = document.createElement("details");
  d.className = "thinking";
  d.open = !!(busy && busy.msg === msg && !msg.content);
  const head = document.createElement("summary");
  head.textContent = "Thinking";
  const text = document.createElement("div");
  text.className = "thinking-body";
  text.textContent = msg.reasoning;
  d.append(head, text);
  return d;
}

function messageEl(msg, i, conv) {
  const art = document.createElement("article");
  art.className = "msg " + msg.role;
  art.dataset.index = i;
  const streaming = busy && busy.msg === msg;
  if (streaming) art.setAttribute("aria-busy", "true");
  const head = document.createElement("div");
  head.className = "msg-head";
  const who = document.createElement("h2");
  who.className = "who";
  who.textContent = msg.role === "user" ? "You" : "pyriver";
  head.appendChild(who);
  const actions = document.createElement("div");
  actions.className = "msg-actions";
  if (!streaming) {
    actions.appendChild(button("Copy", "small", (e) => copy(msg.content, e.target), "Copy this message"));
    if (msg.role === "user") actions.appendChild(button("Edit", "small", () => editMessage(art, i), "Edit this message"));
    if (msg.role === "assistant" && hasExits(msg)) {
      const showing = msg.view ? msg.view === "exits" : conv.settings.river;
      const b = button(showing ? "Markdown" : "Exits", "small", () => {
        msg.view = showing ? "md" : "exits"; saveState(); renderMessages();
      }, showing ? "Show this answer as Markdown" : "Show this answer's exit blocks");
      actions.appendChild(b);
    }
    if (msg.role === "assistant" && i === conv.messages.length - 1) {
      actions.appendChild(button("Regenerate", "small", regenerate, "Regenerate this answer"));
    }
  }
  head.appendChild(actions);
  art.appendChild(head);
  if (msg.role === "assistant" && msg.reasoning) art.appendChild(thinkingEl(msg));
  art.appendChild(messageBody(msg, conv));
  if (msg.role === "assistant") {
    const foot = document.createElement("p");
    foot.className = "summary";
    const bits = [];
    if (msg.summary) bits.push(summaryText(msg.summary));
    if (msg.stopped) bits.push("stopped");
    if (msg.finish === "length") bits.push("cut at max tokens");
    foot.textContent = bits.filter(Boolean).join(" · ");
    if (msg.error) {
      const err = document.createElement("p");
      err.className = "error";
      err.textContent = "Error: " + msg.error;
      art.appendChild(err);
    }
    art.appendChild(foot);
  }
  return art;
}

function renderMessages() {
  const box = $("messages");
  const conv = currentConv();
  const nearBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
  box.replaceChildren();
  if (!conv || !conv.messages.length) {
    const p = document.createElement("p");
    p.className = "empty";
    p.textContent = "Ask something. " + (server && server.river.on && !server.river.lossless
      ? "Each token of the answer shows the block where it left the model." : "");
    box.appendChild(p);
  } else {
    conv.messages.forEach((m, i) => box.appendChild(messageEl(m, i, conv)));
  }
  if (nearBottom || busy) box.scrollTop = box.scrollHeight;
  showLegend();
}

function scheduleDraw() {
  if (drawPending) return;
  drawPending = true;
  requestAnimationFrame(() => {
    drawPending = false;
    if (!busy || busy.conv !== currentConv()) return;
    const box = $("messages");
    const art = box.querySelector('article[data-index="' + busy.conv.messages.indexOf(busy.msg) + '"]');
    if (!art) return renderMessages();
    const nearBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
    art.querySelector(".msg-body").replaceWith(messageBody(busy.msg, busy.conv));
    if (nearBottom) box.scrollTop = box.scrollHeight;
  });
}

function renderList() {
  const ul = $("conv-list");
  ul.replaceChildren();
  for (const c of state.convs) {
    const li = document.createElement("li");
    const open = button(c.title, "conv", () => selectConv(c.id));
    if (c.id === state.current) open.setAttribute("aria-current", "true");
    li.appendChild(open);
    li.appendChild(button("×", "icon delete", () => deleteConv(c.id), "Delete the conversation " + c.title));
    ul.appendChild(li);
  }
}

function showServer() {
  $("model").textContent = server.model || "";
  const pick = $("model-pick");
  pick.hidden = !models;
  $("model").hidden = !!models;
  if (models) {
    pick.replaceChildren(...models.map((m) => new Option(m, m, false, m === chosenModel())));
  }
  const b = $("river-badge");
  const r = server.river;
  b.hidden = false;
  b.className = "badge " + (r.on ? "on" : "off");
  b.textContent = !r.on ? "River off" : r.lossless ? "River lossless" : "River on · τ " + tau(r.exit_threshold);
  renderMessages();
}

function tau(x) { return String(+x.toFixed(4)); }   // the float32 the server holds, as it was typed

function showLegend() {
  const conv = currentConv();
  $("legend").hidden = !(server && server.river.on && !server.river.lossless && conv && conv.settings.river);
}

function showBusy(on) {
  $("stop").hidden = !on;
  $("send").disabled = on;
  if (on) setStatus("Generating…");
}

function setStatus(text) { $("status").textContent = text; }

// ---------------------------------------------------------------- actions
async function copy(text, btn) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (e) {   // no clipboard API (an insecure origin): the old way
    const ta = document.createElement("textarea");
    ta.value = text;
    document.body.appendChild(ta);
    ta.select();
    document.execCommand("copy");
    ta.remove();
  }
  const old = btn.textContent;
  btn.textContent = "Copied";
  setTimeout(() => { btn.textContent = old; }, 1200);
}

function send(text) {
  if (busy || !text.trim()) return;
  const conv = currentConv() || newConv();
  conv.messages.push({ role: "user", content: text });
  if (conv.title === "New chat") titleFrom(conv);
  saveState();
  renderList();
  run(conv);
}

function regenerate() {
  const conv = currentConv();
  if (busy || !conv) return;
  if (conv.messages.length && conv.messages[conv.messages.length - 1].role === "assistant") conv.messages.pop();
  if (!conv.messages.length) return renderMessages();
  run(conv);
}

function editMessage(art, i) {
  if (busy) return;
  const conv = currentConv();
  const msg = conv.messages[i];
  const body = art.querySelector(".msg-body");
  const form = document.createElement("form");
  form.className = "edit";
  const id = "edit-" + i;
  form.innerHTML = '<label class="visually-hidden" for="' + id + '">Edit the message</label>' +
                   '<textarea id="' + id + '" rows="3"></textarea><div class="edit-buttons"></div>';
  const ta = form.querySelector("textarea");
  ta.value = msg.content;
  const bar = form.querySelector(".edit-buttons");
  bar.appendChild(button("Cancel", "", () => renderMessages()));
  const ok = document.createElement("button");
  ok.type = "submit";
  ok.className = "primary";
  ok.textContent = "Save and send";
  bar.appendChild(ok);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    if (!ta.value.trim()) return;
    msg.content = ta.value;
    conv.messages = conv.messages.slice(0, i + 1);
    saveState();
    run(conv);
  });
  ta.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); form.requestSubmit(); }
    if (e.key === "Escape") { e.preventDefault(); renderMessages(); }
  });
  body.replaceWith(form);
  ta.focus();
}

function selectConv(id) {
  if (busy) busy.controller.abort();
  state.current = id;
  saveState();
  renderList();
  renderMessages();
  closeSidebar();
  $("input").focus();
}

function deleteConv(id) {
  if (busy && busy.conv.id === id) busy.controller.abort();
  state.convs = state.convs.filter((c) => c.id !== id);
  if (state.current === id) state.current = state.convs.length ? state.convs[0].id : null;
  saveState();
  renderList();
  renderMessages();
}

function closeSidebar() {
  $("sidebar").classList.remove("open");
  $("menu").setAttribute("aria-expanded", "false");
}

function openSettings() {
  const conv = currentConv() || newConv();
  const s = conv.settings;
  $("s-system").value = s.system;
  $("s-temperature").value = s.temperature;
  $("s-max-tokens").value = s.max_tokens;
  $("s-top-p").value = s.top_p;
  $("s-river").checked = s.river;
  const r = server ? server.river : null;
  $("s-river").disabled = !(r && r.on && !r.lossless);
  $("river-info").textContent = !r ? "" : !r.on
    ? "This server runs without River (start it with pyriver serve --river q4_0)."
    : "The server's River: sidecar " + r.sidecar + ", exit threshold τ " + tau(r.exit_threshold) +
      ", earliest exit block " + (r.min_exit_layer + 1) + " of " + server.n_layer +
      (r.lossless ? ", lossless (drafts up to " + r.draft_max + " tokens, every token verified at full depth)" : "") +
      ". Set when the server starts (--river, --tau, --lossless), the same for every request.";
  $("key-note").textContent = apiKey() ? "A key is saved in this browser." : "No key is saved.";
  $("forget-key").disabled = !apiKey();
  $("settings").returnValue = "";
  $("settings").showModal();
}

function saveSettings() {
  const conv = currentConv();
  const num = (id, lo, hi, def) => {
    const v = parseFloat($(id).value);
    return Number.isFinite(v) ? Math.min(hi, Math.max(lo, v)) : def;
  };
  conv.settings = {
    system: $("s-system").value,
    temperature: num("s-temperature", 0, 2, DEFAULTS.temperature),
    max_tokens: Math.round(num("s-max-tokens", 1, 1e6, DEFAULTS.max_tokens)),
    top_p: num("s-top-p", 0, 1, DEFAULTS.top_p),
    river: $("s-river").checked,
  };
  saveState();
  renderMessages();
}

// ---------------------------------------------------------------- wiring
function init() {
  const input = $("input");
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = input.value;
    if (busy || !text.trim()) return;
    input.value = "";
    input.style.height = "";
    send(text);
  });
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); $("composer").requestSubmit(); }
    else if (e.key === "Escape" && busy) { e.preventDefault(); busy.controller.abort(); }
  });
  input.addEventListener("input", () => {
    input.style.height = "";
    input.style.height = Math.min(input.scrollHeight, 240) + "px";
  });
  $("stop").addEventListener("click", () => { if (busy) busy.controller.abort(); input.focus(); });
  $("new-chat").addEventListener("click", () => {
    if (busy) busy.controller.abort();
    newConv(); renderList(); renderMessages(); closeSidebar(); input.focus();
  });
  $("menu").addEventListener("click", () => {
    const open = $("sidebar").classList.toggle("open");
    $("menu").setAttribute("aria-expanded", String(open));
    if (open) $("new-chat").focus();
  });
  $("open-settings").addEventListener("click", openSettings);
  $("model-pick").addEventListener("change", (e) => {
    if (busy) busy.controller.abort();
    localStorage.setItem(MODEL_STORE, e.target.value);
    connect();
  });
  $("settings").addEventListener("close", () => {
    if ($("settings").returnValue === "save") saveSettings();
    $("open-settings").focus();
  });
  $("forget-key").addEventListener("click", () => {
    localStorage.removeItem(KEY_STORE);
    $("key-note").textContent = "No key is saved.";
    $("forget-key").disabled = true;
  });
  const keyDlg = $("key-dialog");
  keyDlg.addEventListener("cancel", (e) => e.preventDefault());   // the page cannot work without it
  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const key = $("key-input").value.trim();
    if (!key) return;
    localStorage.setItem(KEY_STORE, key);
    keyDlg.close();
    if (keyDlg.resolveKey) keyDlg.resolveKey(key);
  });
  $("messages").addEventListener("click", (e) => {
    const b = e.target.closest(".copy-code");
    if (b) copy(b.closest(".code").querySelector("code").textContent, b);
  });
  $("close-sidebar").addEventListener("click", () => { closeSidebar(); $("menu").focus(); });
  document.querySelector(".main").addEventListener("click", (e) => {   // a tap beside the drawer closes it
    if ($("sidebar").classList.contains("open") && !e.target.closest("#menu")) closeSidebar();
  });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && $("sidebar").classList.contains("open")) closeSidebar();
  });
  if (!currentConv()) { if (state.convs.length) state.current = state.convs[0].id; else newConv(); }
  renderList();
  renderMessages();
  input.focus();
  connect();
}

document.addEventListener("DOMContentLoaded", init);
