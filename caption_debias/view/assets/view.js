// caption-debias view: the page. One script for both modes: a server (`caption-debias view`,
// pages from /api) or a static snapshot (`view --static`, rows embedded in the page, filtered here).
"use strict";

const SNAP = window.CAPTION_DEBIAS_SNAPSHOT || null;
const PAGE = 48;
const state = { view: "kept", reason: "", source: "", q: "", rangeCol: "", min: "", max: "", sort: "", desc: false, offset: 0 };
let META = null;
let lastRows = [];

const $ = (id) => document.getElementById(id);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const fmt = (v) => (typeof v === "number" ? (Number.isInteger(v) ? v.toLocaleString("en") : v.toFixed(3)) : esc(v));

// ---- data sources ------------------------------------------------------------------------------
function valueOf(card, col) {
  if (col === "num_tokens") return card.num_tokens;
  if (col === "num_sentences") return card.sentences.length;
  if (col === "similarity") return card.similarity;
  const v = card.scalars ? card.scalars[col] : undefined;
  return typeof v === "boolean" ? Number(v) : v;
}

async function getJSON(url) {  // the body, or an Error with the server's one line (404, 503, ...)
  const r = await fetch(url);
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

const server = {
  async meta() { return getJSON("api/meta"); },
  async page(s) {
    const p = new URLSearchParams({ view: s.view, offset: s.offset, limit: PAGE });
    if (s.reason) p.set("reason", s.reason);
    if (s.source) p.set("source", s.source);
    if (s.q) p.set("q", s.q);
    if (s.rangeCol && (s.min !== "" || s.max !== "")) p.set("range", `${s.rangeCol}:${s.min}:${s.max}`);
    if (s.sort) { p.set("sort", s.sort); p.set("desc", s.desc ? "1" : "0"); }
    return getJSON("api/page?" + p);
  },
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
  async page(s) {
    let rows = s.view === "removed" ? SNAP.removed : SNAP.kept;
    if (s.reason) rows = rows.filter((c) => c.reason === s.reason);
    if (s.source) rows = rows.filter((c) => c.source === s.source);
    if (s.q) { const q = s.q.toLowerCase(); rows = rows.filter((c) => (c.caption || "").toLowerCase().includes(q)); }
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
    return { total: rows.length, offset: s.offset, rows: rows.slice(s.offset, s.offset + PAGE) };
  },
  async detail(card) { return SNAP.details[card.id] || card; },
  async pair(card) { return SNAP.pairs[card.id] || { removed: card, match: null, similarity: card.similarity, by: card.by }; },
};
const data = SNAP ? snapshot : server;

// ---- rendering ---------------------------------------------------------------------------------
function roleClass(role) { return "role-" + role.replace(/ /g, "-"); }

function groundingRange(rows) {
  let lo = Infinity, hi = -Infinity;
  for (const c of rows) for (const s of c.sentences || []) {
    if (typeof s.sentence_grounding === "number") { lo = Math.min(lo, s.sentence_grounding); hi = Math.max(hi, s.sentence_grounding); }
  }
  return lo <= hi ? [lo, hi] : null;
}

function sentencesHtml(card, range) {
  if (!card.sentences || !card.sentences.length) return esc(card.caption);
  return card.sentences.map((s) => {
    const cls = ["sent", roleClass(s.role)];
    const tips = [s.role];
    let style = "";
    if (s.sentence_keep === false) { cls.push("dropped"); tips.push("dropped by sentence_keep"); }
    if (typeof s.sentence_grounding === "number") {
      tips.push("grounding " + s.sentence_grounding.toFixed(3));
      const a = range && range[1] > range[0] ? (s.sentence_grounding - range[0]) / (range[1] - range[0]) : 0.5;
      style = ` style="background: rgba(46, 160, 67, ${(0.08 + 0.5 * a).toFixed(3)})"`;
    }
    return `<span class="${cls.join(" ")}" title="${esc(tips.join(" · "))}"${style}>${esc(s.text)}</span>`;
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
  for (const k of ["caption_repetition", "duplicate_count", "image_width", "image_height"]) {
    if (sc[k] != null && k !== "clip_score") out.push(`<span>${esc(k)} ${fmt(sc[k])}</span>`);
  }
  return out.join(" ");
}

function cardHtml(card, range) {
  const reason = card.reason ? `<span class="badge reason">${esc(card.reason)}</span>` : "";
  let match = "";
  if (card.match) {
    const sim = typeof card.similarity === "number" ? ` · similarity ${card.similarity.toFixed(3)}` : "";
    match = `<div class="match">matched <b>${esc(card.match)}</b> by ${esc(card.by || "?")}${sim} <button class="compare">side by side</button></div>`;
  }
  const partial = card.reason && card.full_caption === false ? `<div class="muted">first 200 characters (the input folder is not there)</div>` : "";
  return `<article class="card${card.reason ? " removed" : ""}" data-id="${esc(card.id)}" data-key="${esc(card.key)}">
  <div class="thumb"><img src="${esc(card.thumb)}" alt="${esc(card.key)}"></div>
  <div class="body">
    <div class="head"><span class="key">${esc(card.key)}</span><span class="badge src">${esc(card.source)}</span>${reason}</div>
    <div class="counts">${tokensHtml(card.num_tokens)} <span class="nsent">${card.sentences ? card.sentences.length : 0} sentences</span> ${scalarsHtml(card)}</div>
    ${match}
    <p class="caption">${sentencesHtml(card, range)}</p>${partial}
  </div>
</article>`;
}

function render(res) {
  lastRows = res.rows;
  const range = groundingRange(res.rows);
  $("grid").innerHTML = res.rows.length ? res.rows.map((c) => cardHtml(c, range)).join("") : `<p class="empty">No rows match.</p>`;
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
    el.addEventListener("click", (ev) => {
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
    if (META && res.generation !== undefined && res.generation !== META.generation) await reread(res.generation);
  } catch (e) {
    if (mine === ticket) { $("grid").innerHTML = ""; $("status").textContent = "error: " + e.message; }
  }
}

// the server read a folder again (it was rewritten on disk): new counts, reasons and columns
async function reread(generation) {
  META = await data.meta();
  fillControls(META);
  syncControls();
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

function side(card, label) {
  return `<div class="side"><h3>${esc(label)}</h3><img class="big" src="${esc(card.thumb)}" alt="${esc(card.key)}">
  <div class="head"><span class="key">${esc(card.key)}</span><span class="badge src">${esc(card.source)}</span>${card.reason ? `<span class="badge reason">${esc(card.reason)}</span>` : ""}</div>
  <div class="counts">${tokensHtml(card.num_tokens)}</div>${imageLink(card)}
  <p class="caption">${sentencesHtml(card, groundingRange([card]))}</p></div>`;
}

async function openDetail(card) {
  const d = await data.detail(card);
  const extra = d.reason ? `<p><span class="badge reason">${esc(d.reason)}</span> ${esc(JSON.stringify(d.detail || {}))}</p>` : "";
  showModal(`<div class="detail"><div class="side"><img class="big" src="${esc(d.thumb)}" alt="${esc(d.key)}">${imageLink(d)}</div>
  <div class="info"><h2>${esc(d.key)}</h2>${d.path ? `<div class="muted">${esc(d.path)}</div>` : ""}${extra}<div class="counts">${tokensHtml(d.num_tokens)} ${scalarsHtml(d)}</div>
  <h3>Sentences</h3>${sentenceTable(d)}<h3>Every column</h3>${d.columns ? columnsTable(d.columns) : columnsTable({ key: d.key, source: d.source, image: d.image, caption: d.caption })}</div></div>`);
}

async function openPair(card) {
  const p = await data.pair(card);
  const sim = typeof p.similarity === "number" ? p.similarity.toFixed(3) : "?";
  const right = p.match ? side(p.match, "kept: the row it matched") : `<div class="side"><h3>the row it matched</h3><p class="muted">${esc(p.removed.match)} is not a row of these folders (an eval item or another folder).</p></div>`;
  showModal(`<div class="pair-head"><span class="badge reason">${esc(p.removed.reason)}</span> matched by <b>${esc(p.by || "?")}</b>, similarity <b class="sim">${sim}</b></div>
  <div class="pair">${side(p.removed, "removed")}${right}</div>`);
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
  $("source").innerHTML = `<option value="">all sources</option>` + meta.sources.map((s) => `<option>${esc(s)}</option>`).join("");
  const numeric = meta.numeric.map((c) => `<option>${esc(c)}</option>`).join("");
  $("range-col").innerHTML = `<option value="">column…</option>` + numeric;
  $("sort").innerHTML = `<option value="">file order</option>` + numeric;
}

// the controls as `state` says (after fillControls rebuilt them)
function syncControls() {
  const rows = state.view === "kept" ? "kept" : `removed:${state.reason}`;
  if ([...$("rows").options].some((o) => o.value === rows)) $("rows").value = rows;
  $("source").value = state.source;
  const opts = numericFor(state.view).map((c) => `<option>${esc(c)}</option>`).join("");
  $("sort").innerHTML = `<option value="">file order</option>` + opts;
  $("range-col").innerHTML = `<option value="">column…</option>` + opts;
  $("sort").value = state.sort;
  $("range-col").value = state.rangeCol;
}

function numericFor(view) {
  return view === "removed" ? ["similarity"] : META.numeric;
}

function wire() {
  const reload = () => { state.offset = 0; load(); };
  $("rows").addEventListener("change", (e) => {
    const v = e.target.value;
    state.view = v === "kept" ? "kept" : "removed";
    state.reason = v.startsWith("removed:") ? v.slice(8) : "";
    const opts = numericFor(state.view).map((c) => `<option>${esc(c)}</option>`).join("");
    $("sort").innerHTML = `<option value="">file order</option>` + opts;
    $("range-col").innerHTML = `<option value="">column…</option>` + opts;
    state.sort = ""; state.rangeCol = "";
    reload();
  });
  $("source").addEventListener("change", (e) => { state.source = e.target.value; reload(); });
  let timer = null;
  $("search").addEventListener("input", (e) => { clearTimeout(timer); timer = setTimeout(() => { state.q = e.target.value.trim(); reload(); }, 300); });
  for (const id of ["range-col", "range-min", "range-max"]) {
    $(id).addEventListener("change", () => { state.rangeCol = $("range-col").value; state.min = $("range-min").value; state.max = $("range-max").value; reload(); });
  }
  $("sort").addEventListener("change", (e) => { state.sort = e.target.value; reload(); });
  $("order").addEventListener("change", (e) => { state.desc = e.target.value === "1"; if (state.sort) reload(); });
  $("prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - PAGE); load(); window.scrollTo(0, 0); });
  $("next").addEventListener("click", () => { state.offset += PAGE; load(); window.scrollTo(0, 0); });
  $("close").addEventListener("click", closeModal);
  $("modal").addEventListener("click", (e) => { if (e.target.id === "modal") closeModal(); });
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") closeModal(); });
}

async function main() {
  wire();
  await load();  // the first page needs no index; the metadata (filters, sort columns) waits for the index
  META = await data.meta();
  fillControls(META);
  if (SNAP) $("top").insertAdjacentHTML("beforeend", `<span class="badge snap">static snapshot: ${esc(SNAP.note || "")}</span>`);
}
main();
