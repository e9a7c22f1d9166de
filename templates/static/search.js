/* Site search: a combobox over search-index.js, loaded on first use; no server, works from file://.
   Queries split as infralens/build/search.py splits text; every term must prefix-match a token.
   It may arrive after the reader focused the box and typed (infralens.js loads it on first use).
   Uses window.InfraLens (infralens.js). */
(() => {
  const { $, el } = InfraLens, box = $("[data-search-index]");
  if (!box || box.searchReady) return;
  box.searchReady = true;
  // The page carries only the input; the combobox's list, message and live status are made here.
  const input = $("input", box);
  const list = el("div", { className: "site-search-results", id: "site-search-results", hidden: true });
  list.setAttribute("role", "listbox");
  list.setAttribute("aria-label", "Search results");
  const message = el("p", { className: "site-search-message" });
  const panel = el("div", { className: "site-search-panel", hidden: true }, list, message);
  const status = el("p", { className: "site-search-status" });
  status.setAttribute("role", "status");
  box.append(panel, status);
  Object.entries({ role: "combobox", "aria-autocomplete": "list", "aria-expanded": "false", "aria-controls": list.id })
    .forEach(([name, value]) => input.setAttribute(name, value));
  let index = null, stop, loading = false, active = -1;

  const failed = () => say("Search is unavailable: its index did not load.");

  function script(src, onload) {
    document.head.append(el("script", {src, onload, onerror: failed}));
  }

  // search-index.js names the index's chunks (a few dozen labs each, so a build rewrites only the
  // chunk of the lab that changed); each chunk script files itself under its number.
  function load() {
    if (index || loading) return;
    loading = true;
    script(box.dataset.searchIndex, () => {
      const data = window.InfraLensSearchIndex;
      if (data?.version !== 2) return failed();
      let waiting = data.chunks.length;
      const joined = () => {
        const chunks = window.InfraLensSearchChunks || {}, docs = [], terms = [];
        data.chunks.forEach((_, n) => {
          const offset = docs.length;
          docs.push(...chunks[n].docs);
          for (const [token, postings] of chunks[n].terms) {
            terms.push([token, postings.map((value, i) => (i % 2 ? value : value + offset))]);
          }
        });
        [index, stop] = [{docs, terms}, new Set(data.stop)];
        if (input.value.trim()) update();
      };
      if (!waiting) return joined();
      data.chunks.forEach((path) => script(box.dataset.searchRoot + path, () => --waiting || joined()));
    });
  }

  // Document id → best {score, token} for one term; an exact token counts double.
  function matches(term) {
    const hits = new Map();
    for (const [token, postings] of index.terms) {
      if (!token.startsWith(term)) continue;
      const factor = token === term ? 2 : 1;
      for (let i = 0; i < postings.length; i += 2) {
        const score = postings[i + 1] * factor, best = hits.get(postings[i]);
        if (!best || score > best.score) hits.set(postings[i], {score, token});
      }
    }
    return hits;
  }

  function search(query) {
    const words = query.toLowerCase().match(/[\p{L}\p{N}_]+/gu) || [];
    // The last word may be half typed: it stays even when short or a stop word.
    const terms = words.filter((word, i) => i === words.length - 1 || (word.length > 1 && !stop.has(word)));
    if (!terms.some((term) => term.length > 1)) return null;
    const perTerm = terms.map(matches), results = [];
    perTerm[0].forEach((_, doc) => {
      const hits = perTerm.map((termHits) => termHits.get(doc));
      if (hits.every(Boolean)) results.push({doc, terms, hits, score: hits.reduce((sum, hit) => sum + hit.score, 0)});
    });
    return results.sort((a, b) => b.score - a.score || a.doc - b.doc);
  }

  const pattern = (terms) => new RegExp(`(^|[^\\p{L}\\p{N}])(${[...terms].sort((a, b) => b.length - a.length).join("|")})`, "giu");

  // Text with the terms marked, built as nodes: index text is never parsed as HTML.
  function marked(className, text, terms) {
    const span = el("span", {className});
    let at = 0;
    for (const m of text.matchAll(pattern(terms))) {
      const start = m.index + m[1].length;
      span.append(text.slice(at, start), el("mark", {}, m[2]));
      at = start + m[2].length;
    }
    span.append(text.slice(at));
    return span;
  }

  function option({doc, terms, hits}, i) {
    const [title, crumb, url, snippet] = index.docs[doc];
    const a = el("a", {id: `site-search-option-${i}`, href: box.dataset.searchRoot + url, tabIndex: -1});
    a.setAttribute("role", "option");
    a.setAttribute("aria-selected", "false");
    a.append(marked("site-search-title", title, terms), marked("site-search-crumb", crumb, terms), marked("site-search-snippet", snippet, terms));
    // Name the matched tokens that title and snippet do not show, such as a starter's identifiers.
    const unseen = new Set(hits.filter((hit, k) => !pattern([terms[k]]).test(`${title} ${snippet}`)).map((hit) => hit.token));
    if (unseen.size) a.append(marked("site-search-found", `Matches ${[...unseen].join(", ")}`, terms));
    return a;
  }

  function say(text) {
    message.textContent = status.textContent = text;
    message.hidden = !text;
  }

  function show(open) {
    panel.hidden = !open;
    input.setAttribute("aria-expanded", open && !list.hidden);
  }

  function update() {
    const query = input.value.trim();
    if (!index) {
      load();
      say(query ? "Loading the search index…" : "");
      return show(Boolean(query));
    }
    const results = search(query);
    select(-1);
    list.replaceChildren(...(results || []).slice(0, 8).map(option));
    list.hidden = !list.children.length;
    say(results && !results.length ? `No results for “${query}”` : "");
    if (results?.length) status.textContent = `${results.length} result${results.length > 1 ? "s" : ""}`;
    show(Boolean(results));
  }

  function select(i) {
    list.children[active]?.setAttribute("aria-selected", "false");
    const chosen = list.children[(active = i)];
    if (!chosen) return input.removeAttribute("aria-activedescendant");
    chosen.setAttribute("aria-selected", "true");
    chosen.scrollIntoView({block: "nearest"});
    input.setAttribute("aria-activedescendant", chosen.id);
  }

  function close() {
    select(-1);
    show(false);
  }

  input.addEventListener("focus", () => {
    load();
    if (input.value.trim()) update();
  });
  input.addEventListener("input", update);
  input.addEventListener("keydown", (event) => {
    const key = event.key, count = panel.hidden ? 0 : list.children.length;
    if (key === "ArrowDown" || key === "ArrowUp") {
      event.preventDefault();
      if (panel.hidden) update();
      else if (count) select(key === "ArrowDown" ? (active + 1) % count : (active > 0 ? active : count) - 1);
    } else if (key === "Enter" && count) {
      event.preventDefault();
      const href = list.children[Math.max(active, 0)].href;
      close();
      location.href = href;
    } else if (key === "Escape") {
      if (!input.value && panel.hidden) return input.blur();
      event.preventDefault();
      input.value = "";
      update();
    }
  });
  list.addEventListener("click", close);
  // Close when the reader moves elsewhere; not on blur, which would beat a click on a result.
  for (const type of ["pointerdown", "focusin"]) document.addEventListener(type, (event) => box.contains(event.target) || close());
  // infralens.js shows the box, focuses it on "/" and loaded this script on first use.
  box.hidden = false;
  if (document.activeElement === input) load();
})();
