// caption-debias view: the page. One script for both modes: a server (`caption-debias view`,
// pages from /api) or a static snapshot (`view --static`, rows embedded in the page, filtered here).
"use strict";

const SNAP = window.CAPTION_DEBIAS_SNAPSHOT || null;
const PAGE = 48;
const DEFAULTS = { view: "kept", reason: "", source: "", folder: "", tag: "", q: "", re: false, where: "", rangeCol: "", min: "", max: "", sort: "", desc: false, offset: 0, box: "", lasso: "", map: false, color: "reason", cutClip: "", cutGround: "", cutSem: "", cutRep: "", cutRsent: "", mapBy: "" };
const state = { ...DEFAULTS };
let META = null;
let lastRows = [];
const selected = new Set();  // keys of the rows the user picked (exported as a keys file for curate)

const $ = (id) => document.getElementById(id);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const fmt = (v) => (typeof v === "number" ? (Number.isInteger(v) ? v.toLocaleString("en") : v.toFixed(3)) : esc(v));

// ---- the view's state in the URL (#...): a link reopens the same view; back and forward work -----
function stateToHash(st) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(st)) {
    if (v === DEFAULTS[k] || (k === "offset" && !v)) continue;
    p.set(k, typeof v === "boolean" ? (v ? "1" : "0") : String(v));
  }
  const text = p.toString();
  return text ? "#" + text : "";
}

function hashToState(hash) {
  const p = new URLSearchParams((hash || "").replace(/^#/, ""));
  const st = { ...DEFAULTS };
  for (const k of Object.keys(DEFAULTS)) {
    if (!p.has(k)) continue;
    const v = p.get(k);
    if (typeof DEFAULTS[k] === "boolean") st[k] = v === "1";
    else if (k === "offset") st[k] = Math.max(0, parseInt(v, 10) || 0);
    else st[k] = v;
  }
  if (st.view !== "removed") { st.view = "kept"; st.reason = ""; }
  return st;
}

// a new entry in the browser's history when the view changed (a reload or a shared link reopens it)
function remember() {
  const hash = stateToHash(state);
  if (hash !== location.hash && !(hash === "" && location.hash === "")) {
    history.pushState(null, "", hash || location.pathname + location.search);
  }
}

// ---- data sources ------------------------------------------------------------------------------
function valueOf(card, col) {
  if (col === "num_tokens") return card.num_tokens;
  if (col === "num_sentences") return card.sentences.length;
  if (col === "similarity") return card.similarity;
  const v = card.scalars ? card.scalars[col] : undefined;
  return typeof v === "boolean" ? Number(v) : v;
}

function queryParams(s, paged) {  // the API's form of the filters (folder_rows/query.py parse_query)
  const p = new URLSearchParams({ view: s.view });
  if (paged) { p.set("offset", s.offset); p.set("limit", PAGE); }
  if (s.reason) p.set("reason", s.reason);
  if (s.source) p.set("source", s.source);
  if (s.folder !== "") p.set("folder", s.folder);
  if (s.q) p.set("q", s.q);
  if (s.q && s.re) p.set("re", "1");
  if (s.where) p.set("where", s.where);
  if (s.tag) p.set("tag", s.tag);
  if (s.rangeCol && (s.min !== "" || s.max !== "")) p.set("range", `${s.rangeCol}:${s.min}:${s.max}`);
  if (s.sort) { p.set("sort", s.sort); p.set("desc", s.desc ? "1" : "0"); }
  if (s.box) p.set("box", s.box);
  if (s.lasso) p.set("lasso", s.lasso);
  if ((s.box || s.lasso) && s.mapBy) p.set("mapby", s.mapBy);
  return p;
}

async function getJSON(url) {  // the body, or an Error with the server's one line (404, 503, ...)
  const r = await fetch(url);
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

const server = {
  async meta() { return getJSON("api/meta"); },
  async page(s) { return getJSON("api/page?" + queryParams(s, true)); },
  async keys(s) { return (await getJSON("api/keys?" + queryParams(s, false))).keys; },
  async map(by) { return getJSON("api/map?by=" + encodeURIComponent(by || "image")); },
  async mapValues(col, by) { return (await getJSON(`api/map/values?by=${encodeURIComponent(by || "image")}&column=${encodeURIComponent(col)}`)).values; },
  async detail(card) {
    const [f, s, r] = card.id.split(":");
    if (s.startsWith("r")) return getJSON(`api/row?f=${f}&removed=${s.slice(1)}`);
    return getJSON(`api/row?f=${f}&s=${s}&r=${r}`);
  },
  async pair(card) {
    const [f, r] = card.id.split(":");
    return getJSON(`api/pair?f=${f}&removed=${r.slice(1)}`);
  },
};

const snapshot = {
  async meta() { return SNAP.meta; },
  async keys(s) { return (await snapshot.page({ ...s, offset: 0 }, Infinity)).rows.map((c) => c.key); },
  async page(s, size = PAGE) {
    let rows = s.view === "removed" ? SNAP.removed : SNAP.kept;
    if (s.reason) rows = rows.filter((c) => c.reason === s.reason);
    if (s.source) rows = rows.filter((c) => c.source === s.source);
    if (s.folder !== "") rows = rows.filter((c) => String(c.folder) === s.folder);
    if (s.q) {  // the caption or the key holds the text (or matches the expression), any case (folder_rows/index.py's rule)
      let test;
      if (s.re) { const rx = new RegExp(s.q, "i"); test = (t) => rx.test(t); } else { const q = s.q.toLowerCase(); test = (t) => t.toLowerCase().includes(q); }
      rows = rows.filter((c) => test(c.caption || "") || test(String(c.key ?? "")));
    }
    if (s.rangeCol) {
      const lo = s.min === "" ? -Infinity : Number(s.min), hi = s.max === "" ? Infinity : Number(s.max);
      rows = rows.filter((c) => { const v = valueOf(c, s.rangeCol); return v != null && v >= lo && v <= hi; });
    }
    if (s.sort) {
      const k = s.sort, d = s.desc ? -1 : 1;
      rows = rows.slice().sort((a, b) => {
        const x = valueOf(a, k), y = valueOf(b, k);
        if (x == null) return y == null ? 0 : 1;
        if (y == null) return -1;
        return (x - y) * d;
      });
    }
    return { total: rows.length, offset: s.offset, rows: rows.slice(s.offset, s.offset + size) };
  },
  async detail(card) { return SNAP.details[card.id] || card; },
  async pair(card) { return SNAP.pairs[card.id] || { removed: card, match: null, similarity: card.similarity, by: card.by }; },
};
const data = SNAP ? snapshot : server;

// ---- rendering ---------------------------------------------------------------------------------
function roleClass(role) { return "role-" + role.replace(/ /g, "-"); }

// sentence_grounding is in standard deviations of a sentence's fit to other images (docs/curation.md):
// about 0 for a generic sentence, high for one only this picture shows, below 0 for what it lacks.
// One fixed scale, so a shade means the same value under every filter and on every page.
const GROUNDING_FULL = 4;   // green at its darkest from here up
const GROUNDING_LOW = 0.5;  // below this a sentence fits this picture no better than a generic one
function groundingShade(g) {
  if (g < 0) return `rgba(192, 57, 43, ${(0.10 + 0.35 * Math.min(1, -g / 2)).toFixed(3)})`;
  return `rgba(46, 160, 67, ${(0.06 + 0.5 * Math.min(1, g / GROUNDING_FULL)).toFixed(3)})`;
}

// the text with every occurrence of the search (any case) marked; each piece escaped on its own
function highlight(text, needle) {
  const t = String(text ?? "");
  if (!needle || state.re) return esc(t);
  const low = t.toLowerCase(), n = needle.toLowerCase();
  let out = "", at = 0;
  for (let i = low.indexOf(n); i >= 0 && n; i = low.indexOf(n, at)) {
    out += esc(t.slice(at, i)) + `<mark>${esc(t.slice(i, i + n.length))}</mark>`;
    at = i + n.length;
  }
  return out + esc(t.slice(at));
}

// what the thresholds in the panel would do to a card: the server says it (view/thresholds.py, curate's
// rules, semantic duplicates pairwise) for the cards on the page; struck sentences are those below the
// grounding cut in a row that stays (summaries are never masked)
const SLIDERS = [["th-clip", "cutClip", "min_clip_score"], ["th-ground", "cutGround", "drop_ungrounded"],
  ["th-sem", "cutSem", "semantic_duplicate_threshold"], ["th-rep", "cutRep", "repetition_max"], ["th-rsent", "cutRsent", "repeated_sentences_max"]];
function cuts() {  // {curate option: value} of the cuts switched on
  const out = {};
  for (const [, key, name] of SLIDERS) if (state[key] !== "") out[name] = Number(state[key]);
  return out;
}
function sameCuts(a, b) { return JSON.stringify(Object.entries(a).sort()) === JSON.stringify(Object.entries(b).sort()); }
function wouldMark(card) {
  if (card.reason || !lastPreview || !lastPreview.marks) return null;
  return lastPreview.marks[card.id] || null;
}
function wouldGo(card) {
  const m = wouldMark(card);
  return m ? m.reason : null;
}
function wouldStrike(card, s) {  // masked in a row that stays
  const g = cuts().drop_ungrounded;
  return g !== undefined && !card.reason && !wouldGo(card) && s.role === "detail" && typeof s.sentence_grounding === "number" && s.sentence_grounding < g;
}

function sentencesHtml(card) {
  if (!card.sentences || !card.sentences.length) return highlight(card.caption, state.q);
  const weakest = card.scalars ? card.scalars.min_grounding_position : undefined;
  return card.sentences.map((s, i) => {
    const cls = ["sent", roleClass(s.role)];
    if (wouldStrike(card, s)) cls.push("would-strike");
    if (weakest === i + 1) cls.push("weakest");
    const tips = [s.role];
    let style = "";
    if (s.sentence_keep === false) { cls.push("dropped"); tips.push("dropped by sentence_keep"); }
    if (typeof s.sentence_grounding === "number") {
      tips.push("grounding " + s.sentence_grounding.toFixed(3));
      style = ` style="background: ${groundingShade(s.sentence_grounding)}"`;
    }
    if (weakest === i + 1) tips.push("the weakest detail sentence");
    return `<span class="${cls.join(" ")}" title="${esc(tips.join(" · "))}"${style}>${highlight(s.text, state.q)}</span>`;
  }).join(" ");
}

function tokensHtml(n) {
  if (n == null) return "";
  const lim = (L) => `<span class="lim ${n > L ? "over" : "fits"}" title="${n > L ? "longer than" : "fits in"} ${L} tokens">${L}</span>`;
  return `<span class="tok" title="CLIP tokens with start and end">${fmt(n)} tokens</span>${lim(77)}${lim(248)}`;
}

function scalarsHtml(card) {
  const out = [];
  const sc = card.scalars || {};
  if (typeof sc.clip_score === "number") out.push(`<span class="score">clip_score ${sc.clip_score.toFixed(3)}</span>`);
  if (typeof sc.min_detail_grounding === "number") {
    const low = sc.min_detail_grounding < GROUNDING_LOW ? " low" : "";
    out.push(`<span class="weak${low}" title="the lowest sentence_grounding of a detail sentence, and where it sits (red below ${GROUNDING_LOW}: no better than a generic sentence)">weakest detail ${sc.min_detail_grounding.toFixed(2)} (sentence ${fmt(sc.min_grounding_position)})</span>`);
  }
  if (typeof sc.masked_sentences === "number" && sc.masked_sentences) out.push(`<span class="masked">${fmt(sc.masked_sentences)} masked</span>`);
  for (const k of ["caption_repetition", "duplicate_count", "image_width", "image_height"]) {
    if (sc[k] != null && k !== "clip_score") out.push(`<span>${esc(k)} ${fmt(sc[k])}</span>`);
  }
  return out.join(" ");
}

function bitsText(detail) {  // a perceptual-hash match: how many of the 64 bits differ
  return detail && typeof detail.hamming === "number" ? ` · ${detail.hamming} of 64 bits differ` : "";
}

function cardHtml(card) {
  const reason = card.reason ? `<span class="badge reason">${esc(card.reason)}</span>` : "";
  let match = "";
  if (card.match) {
    const sim = typeof card.similarity === "number" ? ` · similarity ${card.similarity.toFixed(3)}` : "";
    match = `<div class="match">matched <b>${esc(card.match)}</b> by ${esc(card.by || "?")}${sim}${bitsText(card.detail)} <button class="compare">side by side</button></div>`;
  }
  const why = card.why ? `<div class="why" title="the signal that removed it, and the rule">${esc(card.why)}</div>` : "";
  const partial = card.reason && card.full_caption === false ? `<div class="muted">first 200 characters (the input folder is not there)</div>` : "";
  const picked = selected.has(card.key);
  const mark = wouldMark(card), going = mark ? mark.reason : null;
  const like = mark && mark.match ? ` (like ${esc(mark.match)}, ${mark.similarity.toFixed(3)})` : "";
  const would = going ? `<span class="badge would" title="what curate would do with the thresholds above${mark.match ? "; the row it matched stays" : ""}">would go: ${esc(going)}${like}</span>` : "";
  const folder = META && META.folders.length > 1 && META.folders[card.folder] ? `<span class="badge folder" title="the folder this row is in">${esc(META.folders[card.folder].name)}</span>` : "";
  return `<article class="card${card.reason ? " removed" : ""}${picked ? " picked" : ""}${going ? " would-go" : ""}" data-id="${esc(card.id)}" data-key="${esc(card.key)}">
  <div class="thumb"><img src="${esc(card.thumb)}" alt="${esc(card.key)}"></div>
  <div class="body">
    <div class="head"><input type="checkbox" class="pick" title="select this row (export its key)"${picked ? " checked" : ""}><span class="key">${highlight(card.key, state.q)}</span>${folder}<span class="badge src">${esc(card.source)}</span>${reason}${would}${(card.tags || []).map((t) => `<span class="badge tag">${esc(t)}</span>`).join("")}</div>
    <div class="counts">${tokensHtml(card.num_tokens)} <span class="nsent">${card.sentences ? card.sentences.length : 0} sentences</span> ${scalarsHtml(card)}</div>
    ${why}${match}
    <p class="caption">${sentencesHtml(card)}</p>${partial}
    <button class="full-caption" title="the whole caption on the card, however long">full caption</button>
  </div>
</article>`;
}

let lastPage = null;  // the page on the grid, drawn again once the folder names are known
function render(res) {
  lastPage = res;
  lastRows = res.rows;
  $("grid").innerHTML = res.rows.length ? res.rows.map(cardHtml).join("") : `<p class="empty">No rows match.</p>`;
  const end = res.offset + res.rows.length;
  const what = state.view === "removed" ? "removed" : "kept";
  const n = (x) => x.toLocaleString("en");
  if (res.total === null) {  // a text search in file order stops once the page is full
    $("status").textContent = `at least ${n(res.at_least)} ${what} rows match (searched ${n(res.searched)} of ${n(res.of)} rows so far; the next page searches on)`;
  } else {
    $("status").textContent = `${n(res.total)} ${what} ${res.total === 1 ? "row matches" : "rows match"}`;
  }
  $("pageinfo").textContent = res.rows.length ? `${n(res.offset + 1)}–${n(end)} of ${res.total === null ? "more" : n(res.total)}` : "";
  $("prev").disabled = res.offset === 0;
  $("next").disabled = res.total === null ? res.rows.length < PAGE : end >= res.total;
  for (const el of document.querySelectorAll(".card")) {
    const card = lastRows.find((c) => c.id === el.dataset.id);
    el.querySelector(".pick").addEventListener("change", (ev) => { pick([card.key], ev.target.checked); });
    el.querySelector(".full-caption").addEventListener("click", (ev) => {
      ev.stopPropagation();
      const full = el.querySelector(".caption").classList.toggle("full");
      ev.target.textContent = full ? "shorter" : "full caption";
    });
    el.addEventListener("click", (ev) => {
      if (ev.target.classList.contains("pick")) return;
      const open = card.match && (ev.target.classList.contains("compare") || card.reason) ? openPair : openDetail;
      open(card).catch((e) => showModal(`<p class="muted">${esc(e.message)}</p>`));
    });
  }
}

let ticket = 0;
async function load() {
  const mine = ++ticket;
  $("status").textContent = "loading…";
  try {
    const res = await data.page(state);
    if (mine !== ticket) return;
    render(res);
    if (META && Object.keys(cuts()).length) previewThresholds();  // the new cards' marks
    if (META && res.generation !== undefined && res.generation !== META.generation) await reread(res.generation);
  } catch (e) {
    if (mine === ticket) { $("grid").innerHTML = ""; $("status").textContent = "error: " + e.message; }
  }
}

// the folders' metadata in the controls; the grid drawn again where the cards depend on it
async function applyMeta(meta) {
  META = meta;
  fillControls(META);
  syncControls();
  await fillThresholds(META);
  previewThresholds();
  // cards name their folders and carry the thresholds' marks once the metadata is there
  if (META.folders.length > 1 && lastPage) render(lastPage);
}

// the server read a folder again (it was rewritten on disk): new counts, reasons and columns
async function reread(generation) {
  await applyMeta(await data.meta());
  $("status").textContent += ` (the folders changed on disk and were read again)`;
}

// ---- detail and side by side -------------------------------------------------------------------
function showModal(html) {
  $("modal-body").innerHTML = html;
  $("modal").hidden = false;
}
function closeModal() { $("modal").hidden = true; $("modal-body").innerHTML = ""; }

function sentenceTable(card) {
  const cols = ["summary_scores", "sentence_grounding", "sentence_scores", "sentence_keep"].filter((k) => (card.sentences || []).some((s) => s[k] !== undefined));
  const toks = card.sentence_tokens || [];
  const head = `<tr><th>#</th><th>role</th><th>sentence</th><th>tokens</th>${cols.map((k) => `<th>${esc(k)}</th>`).join("")}</tr>`;
  const rows = (card.sentences || []).map((s, i) => `<tr class="${s.sentence_keep === false ? "dropped" : ""}"><td>${i + 1}</td><td><span class="sent ${roleClass(s.role)}">${esc(s.role)}</span></td><td class="text">${esc(s.text)}</td><td>${toks[i] ? toks[i].length : ""}</td>${cols.map((k) => `<td>${s[k] === undefined ? "" : fmt(s[k])}</td>`).join("")}</tr>`).join("");
  return `<table class="sentences"><thead>${head}</thead><tbody>${rows}</tbody></table>`;
}

function columnsTable(columns) {
  const show = (v) => {
    if (v === null || v === undefined) return `<span class="muted">null</span>`;
    if (typeof v === "object") { const s = JSON.stringify(v); return esc(s.length > 600 ? s.slice(0, 600) + " …" : s); }
    return esc(v);
  };
  return `<table class="columns"><tbody>${Object.entries(columns || {}).map(([k, v]) => `<tr><th>${esc(k)}</th><td>${show(v)}</td></tr>`).join("")}</tbody></table>`;
}

// the viewer's own image route, or a web URL: never javascript:, data: or anything else a row may hold
const safeLink = (link) => typeof link === "string" && /^(image\/\d+\/|https?:\/\/)/i.test(link);

function imageLink(card) {
  if (safeLink(card.link) && !SNAP) return `<a class="imglink" href="${esc(card.link)}" target="_blank" rel="noopener noreferrer">open the image file (${esc(card.image)})</a>`;
  return `<span class="muted">image: ${esc(card.image || "none")}</span>`;
}

// one caption of a word diff: words the other caption lacks marked (removed on the left, added on the right)
function diffHtml(words) {
  return words.map(([w, op]) => (op === "same" ? esc(w) : `<span class="wd ${op === "added" ? "added" : "removed"}">${esc(w)}</span>`)).join(" ");
}

function side(card, label, diff) {
  const text = diff ? `<p class="caption diff">${diffHtml(diff)}</p>` : `<p class="caption">${sentencesHtml(card)}</p>`;
  return `<div class="side"><h3>${esc(label)}</h3><img class="big" src="${esc(card.thumb)}" alt="${esc(card.key)}">
  <div class="head"><span class="key">${esc(card.key)}</span><span class="badge src">${esc(card.source)}</span>${card.reason ? `<span class="badge reason">${esc(card.reason)}</span>` : ""}</div>
  <div class="counts">${tokensHtml(card.num_tokens)}</div>${imageLink(card)}
  ${text}</div>`;
}

async function openDetail(card) {
  const d = await data.detail(card);
  const extra = d.reason ? `<p><span class="badge reason">${esc(d.reason)}</span> <span class="why">${esc(d.why || JSON.stringify(d.detail || {}))}</span></p>` : "";
  showModal(`<div class="detail"><div class="side"><img class="big" src="${esc(d.thumb)}" alt="${esc(d.key)}">${imageLink(d)}</div>
  <div class="info"><h2>${esc(d.key)}</h2>${d.path ? `<div class="muted">${esc(d.path)}</div>` : ""}${extra}<div class="counts">${tokensHtml(d.num_tokens)} ${scalarsHtml(d)}</div>
  <h3>Sentences</h3>${sentenceTable(d)}${likeHtml(card)}<h3>Every column</h3>${d.columns ? columnsTable(d.columns) : columnsTable({ key: d.key, source: d.source, image: d.image, caption: d.caption })}</div></div>`);
  wireLike(card);
}

// rows like this one: the nearest kept rows by the folder's image or caption embeddings (view/neighbours.py)
function likeHtml(card) {
  const by = (META && META.neighbours) || [];
  if (SNAP || !by.length || card.reason || !/^\d+:\d+:\d+$/.test(card.id)) return "";
  return `<h3>Rows like this one</h3><div class="like-bar">${by.map((b) => `<button type="button" data-by="${esc(b)}">by ${esc(b)}</button>`).join(" ")} <span id="like-status" class="muted"></span></div><div id="like"></div>`;
}

function wireLike(card) {
  for (const b of document.querySelectorAll(".like-bar button")) {
    b.addEventListener("click", async () => {
      const [f, s, r] = card.id.split(":");
      $("like-status").textContent = "finding…";
      try {
        const res = await getJSON(`api/neighbours?f=${f}&s=${s}&r=${r}&by=${encodeURIComponent(b.dataset.by)}`);
        $("like-status").textContent = `the ${res.rows.length} nearest by ${res.column} (cosine)`;
        const cards = likeCards(res.rows);
        $("like").innerHTML = cards.html;
        cards.wire();
      } catch (e) { $("like-status").textContent = "error: " + e.message; }
    });
  }
}

async function openPair(card) {
  const p = await data.pair(card);
  const sim = typeof p.similarity === "number" ? p.similarity.toFixed(3) : "?";
  const d = p.diff;
  const right = p.match ? side(p.match, "kept: the row it matched", d && d.right) : `<div class="side"><h3>the row it matched</h3><p class="muted">${esc(p.removed.match)} is not a row of these folders (an eval item or another folder).</p></div>`;
  const legend = d ? `<div class="muted diff-legend">word diff: <span class="wd removed">only in the removed caption</span> <span class="wd added">only in the kept one</span> · ${Math.round(d.same_share * 100)}% of the words in common</div>` : "";
  showModal(`<div class="pair-head"><span class="badge reason">${esc(p.removed.reason)}</span> matched by <b>${esc(p.by || "?")}</b>, similarity <b class="sim">${sim}</b><span class="bits">${esc(bitsText(p.removed.detail))}</span>
  <div class="why">${esc(p.removed.why || "")}</div></div>${legend}
  <div class="pair">${side(p.removed, "removed", d && d.left)}${right}</div>`);
}

// ---- thresholds: curate's cuts chosen on the page (view/thresholds.py counts them over every row) -----
function download(name, text, type) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([text], { type }));
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

let lastPreview = null;
// the panel's sliders for the cuts some folder here can take; each spans the values there (api/thresholds)
async function fillThresholds(meta) {
  const th = meta.thresholds || {};
  $("thresholds").hidden = Boolean(SNAP) || !SLIDERS.some(([, , name]) => th[name]);
  if ($("thresholds").hidden) return;
  let ranges = {};
  try { ranges = (await getJSON("api/thresholds")).ranges; } catch (e) { $("th-counts").textContent = "error: " + e.message; }
  for (const [id, , name] of SLIDERS) {
    const r = ranges[name];
    $(id + "-label").hidden = !th[name] || !r;
    if (!r) continue;
    $(id).min = r[0];
    if (name === "repeated_sentences_max") { $(id).max = Math.max(1, r[1]); $(id).step = "1"; continue; }
    const top = r[1] + ((r[1] - r[0]) * 0.02 || 0.01);  // a cut just above every value: all of them
    $(id).max = name === "semantic_duplicate_threshold" || name === "repetition_max" ? Math.min(1, top) : top;
    $(id).step = "any";
  }
  syncThresholds();
}

function syncThresholds() {
  for (const [id, key, name] of SLIDERS) {
    const on = state[key] !== "";
    $(id + "-on").checked = on;
    if (on) $(id).value = state[key];
    $(id + "-value").textContent = !on ? "off" : name === "repeated_sentences_max" ? String(Number(state[key])) : Number(state[key]).toFixed(3);
  }
}

let previewTimer = null, previewTicket = 0;
async function previewThresholds() {
  const c = cuts(), none = Object.keys(c).length === 0;
  $("th-config").disabled = none;
  if ($("thresholds").hidden || none) {
    $("th-counts").textContent = "";
    if (lastPreview) { lastPreview = null; if (lastPage) render(lastPage); }
    return;
  }
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(c)) p.set(k, v);
  if (state.view === "kept") p.set("ids", lastRows.map((r) => r.id).join(","));  // these cards are marked
  const mine = ++previewTicket;
  $("th-counts").textContent = "counting…";
  try {
    const res = await getJSON("api/thresholds?" + p);
    if (mine !== previewTicket) return;
    lastPreview = res;
    const n = (x) => x.toLocaleString("en");
    const by = Object.entries(res.removed).map(([r, k]) => `${esc(r)} ${n(k)}`).join(", ");
    $("th-counts").innerHTML = `would remove <b id="th-removed">${n(res.removed_total)}</b> of ${n(res.rows)} rows${by ? ` (${by})` : ""}; the rows left: <b id="th-masked">${n(res.masked_sentences)}</b> sentences masked in ${n(res.masked_rows)} rows`;
    if (lastPage) render(lastPage);
  } catch (e) { if (mine === previewTicket) $("th-counts").textContent = "error: " + e.message; }
}

function thresholdChanged() {
  for (const [id, key] of SLIDERS) state[key] = $(id + "-on").checked ? $(id).value : "";
  syncThresholds();
  clearTimeout(previewTimer);
  previewTimer = setTimeout(() => { history.replaceState(null, "", stateToHash(state) || location.pathname + location.search); previewThresholds(); }, 150);
}

function writeConfig() {
  if (!lastPreview || !sameCuts(lastPreview.config, cuts())) return;
  const text = JSON.stringify(lastPreview.config, null, 1) + "\n";
  download("curate-thresholds.json", text, "application/json");
  $("status").textContent = "wrote curate-thresholds.json: caption-debias curate FOLDER --config curate-thresholds.json --out OUT removes and masks what the panel counts";
}

// ---- tags: written only to the file named by view --tags (view/tags.py) -------------------------
function fillTags(tags) {
  $("tag-filter").hidden = !tags;
  $("tagging").hidden = !tags;
  if (!tags) return;
  $("tag").innerHTML = `<option value="">any</option>` + Object.entries(tags.names).map(([t, n]) => `<option value="${esc(t)}">${esc(t)} (${n.toLocaleString("en")})</option>`).join("");
  if (state.tag && !(state.tag in tags.names)) $("tag").insertAdjacentHTML("beforeend", `<option value="${esc(state.tag)}">${esc(state.tag)} (0)</option>`);
  $("tag").value = state.tag;
}

async function changeTags(on) {
  const tag = $("tag-name").value.trim();
  try {
    const r = await fetch("api/tags", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ keys: [...selected], tag, on }) });
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || r.statusText);
    fillTags({ names: body.names });
    await load();  // the cards show the tag
    $("status").textContent = `${on ? "tagged" : "untagged"} ${selected.size.toLocaleString("en")} rows: ${body.rows.toLocaleString("en")} rows have the tag ${tag}`;
  } catch (e) { $("status").textContent = "error: " + e.message; }
}

async function exportTag() {
  try {
    const keys = (await getJSON("api/tags/keys?tag=" + encodeURIComponent(state.tag))).keys;
    download(`tag-${state.tag}-${keys.length}.jsonl`, keysFileText(keys), "text/plain");
    $("status").textContent = `exported the ${keys.length.toLocaleString("en")} rows tagged ${state.tag}: curate --exclude-keys, --include-keys or --keep-keys reads the file`;
  } catch (e) { $("status").textContent = "error: " + e.message; }
}

// ---- images found by text (view --model; view/text_search.py) -----------------------------------
function likeCards(rows) {  // small cards with their similarity; a click opens the row
  const html = rows.map((c) => `<figure class="like-card" data-id="${esc(c.id)}"><img src="${esc(c.thumb)}" alt="${esc(c.key)}"><figcaption><span class="key">${esc(c.key)}</span> <b>${c.similarity.toFixed(3)}</b></figcaption></figure>`).join("");
  return { html, wire: () => { for (const el of document.querySelectorAll(".like-card")) {
    const row = rows.find((c) => c.id === el.dataset.id);
    el.addEventListener("click", () => openDetail(row).catch((e) => showModal(`<p class="muted">${esc(e.message)}</p>`)));
  } } };
}

async function findImages(text) {
  showModal(`<h2>Images for “${esc(text)}”</h2><p id="text-status" class="muted">encoding the text (the first query loads the model)…</p><div id="like"></div>`);
  try {
    const res = await getJSON(`api/text?q=${encodeURIComponent(text)}`);
    const cards = likeCards(res.rows);
    $("text-status").textContent = `the ${res.rows.length} nearest images by ${res.model}'s text embedding (cosine)`;
    $("like").innerHTML = cards.html;
    cards.wire();
  } catch (e) { $("text-status").textContent = "error: " + e.message; }
}

// ---- two passes compared (view/pass_diff.py) -----------------------------------------------------
async function comparePasses() {
  const n = (x) => x.toLocaleString("en");
  $("diff-out").textContent = "comparing…";
  try {
    const d = await getJSON(`api/diff?a=${$("diff-a").value}&b=${$("diff-b").value}`);
    const reasons = Object.entries(d.removed_by_reason).map(([r, k]) => `${esc(r)} ${n(k)}`).join(", ");
    const line = d.descends ? `${esc(d.b.name)} is a later pass of ${esc(d.a.name)}` : `${esc(d.b.name)} does not descend from ${esc(d.a.name)}`;
    $("diff-out").innerHTML = `${line}: of <b>${n(d.a.rows)}</b> rows, <b id="diff-removed">${n(d.removed)}</b> removed${reasons ? ` (${reasons})` : ""}, <b id="diff-kept">${n(d.kept)}</b> kept, ${n(d.more_masked)} with more sentences masked${d.added ? `; ${n(d.added)} rows only in ${esc(d.b.name)}` : ""}`;
  } catch (e) { $("diff-out").textContent = "error: " + e.message; }
}

// ---- controls ----------------------------------------------------------------------------------
function fillControls(meta) {
  $("folders").textContent = meta.folders.map((f) => `${f.name} (${f.kind}, ${f.rows.toLocaleString("en")} rows${f.removed ? `, ${f.removed.toLocaleString("en")} removed` : ""})`).join(" · ");
  const rows = [`<option value="kept">kept rows (${meta.rows.toLocaleString("en")})</option>`];
  if (meta.removed) {
    rows.push(`<option value="removed:">removed: every reason (${meta.removed.toLocaleString("en")})</option>`);
    for (const [r, n] of Object.entries(meta.reasons)) rows.push(`<option value="removed:${esc(r)}">removed: ${esc(r)} (${n.toLocaleString("en")})</option>`);
  }
  $("rows").innerHTML = rows.join("");
  $("legend-keep").hidden = !meta.columns.includes("sentence_keep");
  $("legend-grounding").hidden = !meta.columns.includes("sentence_grounding");
  $("legend-weakest").hidden = !meta.columns.includes("sentence_grounding");
  $("source").innerHTML = `<option value="">all sources</option>` + meta.sources.map((s) => `<option>${esc(s)}</option>`).join("");
  $("folder").innerHTML = `<option value="">all folders</option>` + meta.folders.map((f, i) => `<option value="${i}">${esc(f.name)}</option>`).join("");
  $("folder-filter").hidden = meta.folders.length < 2;
  $("where-filter").hidden = Boolean(SNAP);  // a field query runs on the server's index
  fillTags(meta.tags);
  $("text-search").hidden = Boolean(SNAP) || !meta.text_search;
  const folderOptions = meta.folders.map((f, i) => `<option value="${i}">${esc(f.name)}</option>`).join("");
  $("diff-a").innerHTML = folderOptions;
  $("diff-b").innerHTML = folderOptions;
  if (meta.folders.length > 1 && $("diff-a").value === $("diff-b").value) $("diff-b").value = "1";
  $("compare").hidden = Boolean(SNAP) || meta.folders.length < 2;
  const numeric = meta.numeric.map((c) => `<option>${esc(c)}</option>`).join("");
  $("range-col").innerHTML = `<option value="">column…</option>` + numeric;
  $("sort").innerHTML = `<option value="">file order</option>` + numeric;
  $("map-toggle").hidden = !meta.map && !meta.caption_map;
  $("map-color").innerHTML = `<option value="reason">removal reason</option><option value="source">source</option>` + numeric;
}

// the controls as `state` says (after fillControls rebuilt them, or the URL changed)
function syncControls() {
  const rows = state.view === "kept" ? "kept" : `removed:${state.reason}`;
  if ([...$("rows").options].some((o) => o.value === rows)) $("rows").value = rows;
  $("source").value = state.source;
  if ([...$("folder").options].some((o) => o.value === state.folder)) $("folder").value = state.folder;
  if (META) {
    const opts = numericFor(state.view).map((c) => `<option>${esc(c)}</option>`).join("");
    $("sort").innerHTML = `<option value="">file order</option>` + opts;
    $("range-col").innerHTML = `<option value="">column…</option>` + opts;
  }
  $("sort").value = state.sort;
  $("order").value = state.desc ? "1" : "0";
  $("range-col").value = state.rangeCol;
  $("range-min").value = state.min;
  $("range-max").value = state.max;
  $("search").value = state.q;
  $("search-re").checked = state.re;
  $("where").value = state.where;
  if ([...$("tag").options].some((o) => o.value === state.tag)) $("tag").value = state.tag;
  $("tag-export").hidden = !state.tag;
  $("map-color").value = state.color;
  syncThresholds();
  $("map-clear").hidden = !state.box && !state.lasso;
}

function numericFor(view) {
  return view === "removed" ? ["similarity"] : META.numeric;
}

// ---- selection: rows picked one by one or every row of a filter; exported as a keys file ----------
function showSelection() {
  $("sel-count").textContent = `${selected.size.toLocaleString("en")} selected`;
  $("sel-export").disabled = selected.size === 0;
  $("tag-add").disabled = $("tag-remove").disabled = selected.size === 0;
  for (const el of document.querySelectorAll(".card")) {
    const card = lastRows.find((c) => c.id === el.dataset.id);  // its key as served: HTML reads a \r in data-key as \n
    const on = card !== undefined && selected.has(card.key);
    el.classList.toggle("picked", on);
    el.querySelector(".pick").checked = on;
  }
}

function pick(keys, on) {
  for (const k of keys) { if (k == null) continue; if (on) selected.add(k); else selected.delete(k); }
  showSelection();
  keepSelection();
}

// the selection outlives a reload of this tab (not a new tab), for the same folders; a selection too
// large for the browser's session storage is kept in the page only
const SELECTION_ITEM = "caption-debias-view-selection";
function keepSelection() {
  if (!META) return;
  try {
    const folders = META.folders.map((f) => f.path);
    sessionStorage.setItem(SELECTION_ITEM, JSON.stringify({ folders, keys: [...selected] }));
  } catch (e) { /* storage full or unavailable (a file:// snapshot): the page keeps it */ }
}
function restoreSelection() {
  try {
    const kept = JSON.parse(sessionStorage.getItem(SELECTION_ITEM) || "null");
    if (kept && JSON.stringify(kept.folders) === JSON.stringify(META.folders.map((f) => f.path))) pick(kept.keys, true);
  } catch (e) { /* nothing kept */ }
}

// every key as a JSON string, one a line (JSON lines): curate --exclude-keys / --include-keys read it,
// and a key holding a line break or a carriage return stays one key (curate/keys.py)
function keysFileText(keys) {
  return keys.map((k) => JSON.stringify(k) + "\n").join("");
}

function exportKeys() {
  const keys = [...selected];
  download(`selected-keys-${keys.length}.jsonl`, keysFileText(keys), "text/plain");
  $("status").textContent = `exported ${keys.length.toLocaleString("en")} keys: curate --exclude-keys FILE removes them, --include-keys FILE keeps only them, --keep-keys FILE keeps them whatever a filter says`;
}

async function selectAllMatching() {
  $("sel-count").textContent = "selecting…";
  try { pick(await data.keys(state), true); } catch (e) { $("status").textContent = "error: " + e.message; showSelection(); }
}

// ---- the maps of the image and the caption embeddings (canvases; the server projects, view/embedding_map.py) --
// two instances of one map: the image map (ids map-*) and, beside it, the caption map (ids cmap-*)
const mapOf = (by, p) => ({ by, ids: { canvas: p + "-canvas", over: p + "-over", wrap: p + "-wrap", tip: p + "-tip", status: p + "-status", legend: p + "-legend", col: p + "-col" }, data: null, colorOf: null, view: null, drag: null, path: null, zoom: null });
const MAP = mapOf("image", "map");
const CMAP = mapOf("caption", "cmap");
const MAPS = [MAP, CMAP];
const PALETTE = ["#9aa5b1", "#d62728", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#393b79", "#ad494a", "#637939"];
const RAMP = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];  // viridis stops

function ramp(t) {
  const x = Math.min(1, Math.max(0, t)) * (RAMP.length - 1), i = Math.min(RAMP.length - 2, Math.floor(x)), f = x - i;
  const c = RAMP[i].map((v, k) => Math.round(v + (RAMP[i + 1][k] - v) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}
const mapEl = (M, what) => $(M.ids[what]);
const mapsShown = () => MAPS.filter((M) => M === MAP ? META && META.map : META && META.caption_map);
const selectedOn = (M) => (state.mapBy || "image") === M.by;  // the map the box or lasso was drawn on

async function openMap() {
  $("map-panel").hidden = false;
  $("map-toggle").classList.add("on");
  $("cmap-note").textContent = META && META.caption_map_note ? META.caption_map_note : "";
  for (const M of MAPS) mapEl(M, "col").hidden = !mapsShown().includes(M);
  await Promise.all(mapsShown().map((M) => openOne(M).catch((e) => { mapEl(M, "status").textContent = "error: " + e.message; })));
}

async function openOne(M) {
  if (M.data) return drawMap(M);
  mapEl(M, "status").textContent = "computing the map…";
  for (;;) {
    const m = await data.map(M.by);
    if (m.status === "ready") { M.data = m; break; }
    await new Promise((r) => setTimeout(r, 500));
  }
  const m = M.data;
  const shown = m.shown < m.rows ? `${m.shown.toLocaleString("en")} of ${m.rows.toLocaleString("en")} rows drawn (a seeded sample; the box selects among all)` : `${m.rows.toLocaleString("en")} rows`;
  mapEl(M, "status").textContent = `${m.column}: ${shown} · ${m.method}, fitted on ${m.fitted_on.toLocaleString("en")} rows, ${Math.round((m.explained[0] + m.explained[1]) * 100)}% of the variance${m.without ? ` · ${m.without.toLocaleString("en")} rows left out (${Object.entries(m.left_out || {}).filter(([, n]) => n).map(([why, n]) => `${why}: ${n.toLocaleString("en")}`).join(", ")})` : ""}`;
  await colourMap(M);
}

async function colourMap(M) {
  if (!M) return Promise.all(MAPS.filter((x) => x.data).map(colourMap));
  try { await paintMap(M); } catch (e) { mapEl(M, "legend").textContent = "error: " + e.message; }
}

async function paintMap(M) {
  if (![...$("map-color").options].some((o) => o.value === state.color)) state.color = "reason";  // a column this folder lacks
  const m = M.data, col = state.color;
  let legend = "";
  if (col === "reason" || col === "source") {
    const codes = m[col], names = col === "reason" ? m.reasons : m.sources;
    const counts = names.map(() => 0);
    for (const c of codes) if (c >= 0) counts[c]++;
    M.colorOf = (i) => (codes[i] >= 0 ? PALETTE[codes[i] % PALETTE.length] : "#cccccc");
    legend = names.map((n, k) => `<span class="sw"><i style="background:${PALETTE[k % PALETTE.length]}"></i>${esc(n)} (${counts[k].toLocaleString("en")})</span>`).join("");
  } else {
    const values = await data.mapValues(col, M.by);
    let lo = Infinity, hi = -Infinity;
    for (const v of values) if (typeof v === "number") { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    const span = hi > lo ? hi - lo : 1;
    const bins = 32, colours = [...Array(bins)].map((_, b) => ramp(b / (bins - 1)));
    M.colorOf = (i) => (typeof values[i] === "number" ? colours[Math.min(bins - 1, Math.floor(((values[i] - lo) / span) * bins))] : "#d5d9de");
    legend = lo <= hi ? `<span class="sw">${esc(col)}: ${fmt(lo)} <i class="ramp"></i> ${fmt(hi)}</span><span class="sw"><i style="background:#d5d9de"></i>no value</span>` : `<span class="muted">${esc(col)}: no values on the map</span>`;
  }
  mapEl(M, "legend").innerHTML = legend;
  drawMap(M);
}

function mapGeometry(M) {
  const canvas = mapEl(M, "canvas"), w = mapEl(M, "wrap").clientWidth, h = 420, dpr = window.devicePixelRatio || 1;
  for (const c of [canvas, mapEl(M, "over")]) { c.width = w * dpr; c.height = h * dpr; c.style.width = w + "px"; c.style.height = h + "px"; }
  const [bx0, by0, bx1, by1] = M.data.bounds || [0, 0, 1, 1], pad = 12;
  const z = M.zoom || { k: 1, cx: (bx0 + bx1) / 2, cy: (by0 + by1) / 2 };  // the wheel zooms, a double click resets
  const hw = (bx1 - bx0 || 1) / 2 / z.k, hh = (by1 - by0 || 1) / 2 / z.k;
  const x0 = z.cx - hw, y0 = z.cy - hh;
  const sx = (w - 2 * pad) / (2 * hw), sy = (h - 2 * pad) / (2 * hh);
  M.view = {
    w, h, dpr,
    px: (x) => pad + (x - x0) * sx, py: (y) => h - pad - (y - y0) * sy,
    dx: (px) => x0 + (px - pad) / sx, dy: (py) => y0 + (h - pad - py) / sy,
  };
}

function currentLasso() {  // [[x, y], ...] in map coordinates, or null
  if (!state.lasso) return null;
  const pts = state.lasso.split(";").map((p) => p.split(",").map(Number));
  return pts.length >= 3 && pts.every((p) => p.length === 2 && p.every(Number.isFinite)) ? pts : null;
}

function inLasso(pts, x, y) {  // the even-odd rule, as folder_rows/index.py inside_polygon
  let inside = false;
  for (let i = 0, j = pts.length - 1; i < pts.length; j = i++) {
    const [x0, y0] = pts[j], [x1, y1] = pts[i];
    if ((y0 > y) !== (y1 > y) && x < x0 + ((y - y0) * (x1 - x0)) / (y1 - y0)) inside = !inside;
  }
  return inside;
}

function currentBox() {
  if (!state.box) return null;
  const b = state.box.split(":").map(Number);
  return b.length === 4 && b.every(Number.isFinite) ? [Math.min(b[0], b[2]), Math.min(b[1], b[3]), Math.max(b[0], b[2]), Math.max(b[1], b[3])] : null;
}

// every point, one fill colour at a time (a few hundred state changes, not 100,000); outside the box faded
function drawMap(M) {
  if (!M) { for (const x of MAPS) drawMap(x); return; }
  if (!M.data || $("map-panel").hidden || mapEl(M, "col").hidden) return;
  const t0 = performance.now();
  mapGeometry(M);
  const mine = selectedOn(M);
  const m = M.data, v = M.view, ctx = mapEl(M, "canvas").getContext("2d"), box = mine ? currentBox() : null, lasso = mine ? currentLasso() : null;
  ctx.setTransform(v.dpr, 0, 0, v.dpr, 0, 0);
  ctx.clearRect(0, 0, v.w, v.h);
  const byColour = new Map();
  for (let i = 0; i < m.x.length; i++) {
    const c = M.colorOf(i);
    let list = byColour.get(c);
    if (!list) byColour.set(c, (list = []));
    list.push(i);
  }
  const size = m.x.length > 20000 ? 2 : m.x.length > 2000 ? 3 : 5;
  for (const [c, list] of byColour) {
    ctx.fillStyle = c;
    for (const i of list) {
      const inside = (!box || (m.x[i] >= box[0] && m.x[i] <= box[2] && m.y[i] >= box[1] && m.y[i] <= box[3])) && (!lasso || inLasso(lasso, m.x[i], m.y[i]));
      ctx.globalAlpha = inside ? 0.85 : 0.12;
      ctx.fillRect(v.px(m.x[i]) - size / 2, v.py(m.y[i]) - size / 2, size, size);
    }
  }
  ctx.globalAlpha = 1;
  drawOverlay(M, box ? [v.px(box[0]), v.py(box[3]), v.px(box[2]), v.py(box[1])] : null);
  if (lasso) drawPath(M, lasso.map(([x, y]) => [v.px(x), v.py(y)]), true);
  mapEl(M, "canvas").dataset.drawMs = String(Math.round(performance.now() - t0));
  mapEl(M, "canvas").dataset.points = String(m.x.length);
}

function drawOverlay(M, rect) {
  const v = M.view, ctx = mapEl(M, "over").getContext("2d");
  ctx.setTransform(v.dpr, 0, 0, v.dpr, 0, 0);
  ctx.clearRect(0, 0, v.w, v.h);
  if (!rect) return;
  const [a, b, c, d] = rect;
  ctx.fillStyle = "rgba(59, 110, 168, 0.08)";
  ctx.strokeStyle = "#3b6ea8";
  ctx.lineWidth = 1.5;
  ctx.fillRect(Math.min(a, c), Math.min(b, d), Math.abs(c - a), Math.abs(d - b));
  ctx.strokeRect(Math.min(a, c), Math.min(b, d), Math.abs(c - a), Math.abs(d - b));
}

function drawPath(M, points, closed) {  // a lasso being drawn, or the one in force
  const v = M.view, ctx = mapEl(M, "over").getContext("2d");
  ctx.setTransform(v.dpr, 0, 0, v.dpr, 0, 0);
  if (!closed) ctx.clearRect(0, 0, v.w, v.h);
  if (points.length < 2) return;
  ctx.beginPath();
  ctx.moveTo(points[0][0], points[0][1]);
  for (const [x, y] of points.slice(1)) ctx.lineTo(x, y);
  if (closed) ctx.closePath();
  ctx.fillStyle = "rgba(59, 110, 168, 0.08)";
  ctx.strokeStyle = "#3b6ea8";
  ctx.lineWidth = 1.5;
  if (closed) ctx.fill();
  ctx.stroke();
}

// a point's thumbnail beside the cursor (its row's id names the thumbnail route)
function hoverPoint(M, px, py) {
  const tip = mapEl(M, "tip"), i = nearestPoint(M, px, py);
  if (i < 0) { tip.hidden = true; return; }
  const id = M.data.id[i], [f, s, r] = id.split(":");
  const src = s.startsWith("r") ? `api/thumb?f=${f}&removed=${s.slice(1)}` : `api/thumb?f=${f}&s=${s}&r=${r}`;
  if (tip.dataset.id !== id) {
    tip.dataset.id = id;
    tip.innerHTML = `<img src="${esc(src)}" alt=""><div>${esc(M.data.key ? M.data.key[i] : id)}</div>`;
  }
  tip.style.left = `${Math.min(px + 14, M.view.w - 140)}px`;
  tip.style.top = `${Math.max(0, py - 60)}px`;
  tip.hidden = false;
}

function nearestPoint(M, px, py) {
  const m = M.data, v = M.view;
  let best = -1, bestD = 64;  // within 8 px
  for (let i = 0; i < m.x.length; i++) {
    const dx = v.px(m.x[i]) - px, dy = v.py(m.y[i]) - py, d = dx * dx + dy * dy;
    if (d < bestD) { bestD = d; best = i; }
  }
  return best;
}

function mapReleased(M, ev, at) {  // the end of a drag on map M: a lasso, a box or a click
  const [a, b] = M.drag, [c, d] = at(ev), v = M.view;
  const path = M.path;
  M.drag = null;
  M.path = null;
  const r = (x) => Number(x.toPrecision(6));
  const far = path && path.some(([x, y]) => Math.abs(x - a) >= 4 || Math.abs(y - b) >= 4);
  if (path && far && path.length >= 3) {  // a lasso: its outline, at most 300 vertices, in map coordinates
    const step = Math.ceil(path.length / 300);
    state.lasso = path.filter((_, i) => i % step === 0).map(([x, y]) => `${r(v.dx(x))},${r(v.dy(y))}`).join(";");
    state.box = "";
    state.mapBy = M.by === "image" ? "" : M.by;
    change();
    return;
  }
  if (Math.abs(c - a) < 4 && Math.abs(d - b) < 4) {  // a click: the nearest point's row
    drawMap(M);
    const i = nearestPoint(M, a, b);
    if (i >= 0) openDetail({ id: M.data.id[i] }).catch((e) => showModal(`<p class="muted">${esc(e.message)}</p>`));
    return;
  }
  state.box = [r(v.dx(Math.min(a, c))), r(v.dy(Math.max(b, d))), r(v.dx(Math.max(a, c))), r(v.dy(Math.min(b, d)))].join(":");
  state.lasso = "";
  state.mapBy = M.by === "image" ? "" : M.by;
  change();
}

function wireOneMap(M) {
  const over = mapEl(M, "over");
  const at = (ev) => { const r = over.getBoundingClientRect(); return [ev.clientX - r.left, ev.clientY - r.top]; };
  over.addEventListener("mousedown", (ev) => {
    if (!M.data) return;
    M.drag = at(ev);
    M.path = $("map-lasso").checked ? [at(ev)] : null;
    ev.preventDefault();
  });
  over.addEventListener("mousemove", (ev) => { if (!M.drag && M.data) hoverPoint(M, ...at(ev)); });
  over.addEventListener("mouseleave", () => { mapEl(M, "tip").hidden = true; });
  window.addEventListener("mousemove", (ev) => {
    if (!M.drag) return;
    if (M.path) { M.path.push(at(ev)); drawPath(M, M.path, false); } else drawOverlay(M, [...M.drag, ...at(ev)]);
  });
  window.addEventListener("mouseup", (ev) => { if (M.drag) mapReleased(M, ev, at); });
  over.addEventListener("wheel", (ev) => {  // zoom about the cursor
    if (!M.data) return;
    ev.preventDefault();
    const [px, py] = at(ev), v = M.view, b = M.data.bounds;
    const z = M.zoom || { k: 1, cx: (b[0] + b[2]) / 2, cy: (b[1] + b[3]) / 2 };
    const k = Math.min(256, Math.max(1, z.k * (ev.deltaY < 0 ? 1.25 : 0.8)));
    const mx = v.dx(px), my = v.dy(py), f = z.k / k;
    M.zoom = k === 1 ? null : { k, cx: mx + (z.cx - mx) * f, cy: my + (z.cy - my) * f };
    drawMap(M);
  }, { passive: false });
  over.addEventListener("dblclick", () => { M.zoom = null; drawMap(M); });
}

function wireMap() {
  for (const M of MAPS) wireOneMap(M);
  $("map-color").addEventListener("change", (e) => { state.color = e.target.value; remember(); colourMap(); });
  $("map-clear").addEventListener("click", () => { state.box = ""; state.lasso = ""; state.mapBy = ""; change(); });
  $("map-toggle").addEventListener("click", () => {
    state.map = $("map-panel").hidden;
    remember();
    if (state.map) openMap().catch((e) => { $("map-status").textContent = "error: " + e.message; });
    else { $("map-panel").hidden = true; $("map-toggle").classList.remove("on"); }
  });
  window.addEventListener("resize", () => drawMap());
}

// ---- wiring ------------------------------------------------------------------------------------
// a filter changed: back to the first page, a new history entry, the rows again
function change() {
  state.offset = 0;
  remember();
  syncControls();
  drawMap();
  load();
}

function wire() {
  $("rows").addEventListener("change", (e) => {
    const v = e.target.value;
    state.view = v === "kept" ? "kept" : "removed";
    state.reason = v.startsWith("removed:") ? v.slice(8) : "";
    state.sort = ""; state.rangeCol = ""; state.min = ""; state.max = "";
    change();
  });
  $("source").addEventListener("change", (e) => { state.source = e.target.value; change(); });
  $("folder").addEventListener("change", (e) => { state.folder = e.target.value; change(); });
  let timer = null;
  $("search").addEventListener("input", (e) => { clearTimeout(timer); timer = setTimeout(() => { state.q = e.target.value.trim(); change(); }, 300); });
  $("search-re").addEventListener("change", (e) => { state.re = e.target.checked; if (state.q) change(); else remember(); });
  $("where").addEventListener("change", (e) => { state.where = e.target.value.trim(); change(); });
  for (const id of ["range-col", "range-min", "range-max"]) {
    $(id).addEventListener("change", () => { state.rangeCol = $("range-col").value; state.min = $("range-min").value; state.max = $("range-max").value; change(); });
  }
  $("sort").addEventListener("change", (e) => { state.sort = e.target.value; change(); });
  $("order").addEventListener("change", (e) => { state.desc = e.target.value === "1"; if (state.sort) change(); else remember(); });
  $("prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - PAGE); remember(); load(); window.scrollTo(0, 0); });
  $("next").addEventListener("click", () => { state.offset += PAGE; remember(); load(); window.scrollTo(0, 0); });
  $("close").addEventListener("click", closeModal);
  $("modal").addEventListener("click", (e) => { if (e.target.id === "modal") closeModal(); });
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") closeModal(); });
  $("sel-page").addEventListener("click", () => pick(lastRows.map((c) => c.key), true));
  $("sel-all").addEventListener("click", selectAllMatching);
  $("sel-clear").addEventListener("click", () => { selected.clear(); showSelection(); keepSelection(); });
  $("sel-export").addEventListener("click", exportKeys);
  wireMap();
  for (const [id] of SLIDERS) for (const el of [$(id), $(id + "-on")]) el.addEventListener("input", thresholdChanged);
  $("th-config").addEventListener("click", writeConfig);
  $("diff-go").addEventListener("click", comparePasses);
  $("tag").addEventListener("change", (e) => { state.tag = e.target.value; change(); });
  $("text-q").addEventListener("keydown", (e) => { if (e.key === "Enter") findImages(e.target.value); });
  $("tag-add").addEventListener("click", () => changeTags(true));
  $("tag-remove").addEventListener("click", () => changeTags(false));
  $("tag-export").addEventListener("click", exportTag);
  window.addEventListener("popstate", () => {  // back / forward: the view that URL names
    Object.assign(state, hashToState(location.hash));
    syncControls();
    if (state.map && META && (META.map || META.caption_map)) openMap().catch((e) => { $("map-status").textContent = "error: " + e.message; });
    else $("map-panel").hidden = true;
    previewThresholds();
    load();
  });
}

async function main() {
  Object.assign(state, hashToState(location.hash));
  wire();
  syncControls();
  await load();  // the first page needs no index; the metadata (filters, sort columns) waits for the index
  await applyMeta(await data.meta());
  restoreSelection();
  document.body.dataset.ready = "1";  // the controls hold the folders' metadata: a script (or a test) may act now
  if (SNAP) $("top").insertAdjacentHTML("beforeend", `<span class="badge snap">static snapshot: ${esc(SNAP.note || "")}</span>`);
  if (state.map && (META.map || META.caption_map)) openMap().catch((e) => { $("map-status").textContent = "error: " + e.message; });
}
main();
