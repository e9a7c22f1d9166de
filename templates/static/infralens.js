/* InfraLens reader: theme toggle, folding navigation, annotated code reader, line links, copy
   buttons, reading progress, and the loaders of search and calculators; and window.InfraLens, the
   helpers every other script of the theme uses. Progressive enhancement only: every page reads
   completely without this file. No dependencies. */
(() => {
  const doc = document, html = doc.documentElement;
  // The reader's script sits beside this one (run deferred, so currentScript names this file).
  const staticSrc = doc.currentScript && doc.currentScript.src.replace(/infralens\.js([?#].*)?$/, "");
  const readerSrc = staticSrc && staticSrc + "reader.js";

  /* The shared helpers. They live in this file, which every page loads, rather than in a file of
     their own, which would cost every page one more request and its bytes. The other scripts all
     run after this one: a page's own (index.js, questions.js) come after it in base.html and run
     deferred, in order; the rest are loaded by it or by the reader. */
  const $ = (selector, scope = doc) => scope.querySelector(selector);
  const $$ = (selector, scope = doc) => [...scope.querySelectorAll(selector)];
  // A new element with these properties, holding these children (nodes or text). Attributes that
  // not every browser reflects as properties (role, aria-*) are the caller's to set.
  const el = (tag, props, ...children) => {
    const node = Object.assign(doc.createElement(tag), props);
    node.append(...children);
    return node;
  };
  /* Progress, in this browser only: the labs visited and the questions answered ({lab: {seen: 1,
     q: {id: 1 tried, 2 right}}}), under one localStorage key. Where storage is off (private mode,
     a file:// page in some browsers) or full, read and update give null: nothing is kept. */
  const key = "infralens-progress", progress = {
    read() {
      try { return JSON.parse(localStorage.getItem(key)) || {}; } catch (e) { return null; }
    },
    // Save change(a lab's entry, {} when new) as its entry; give every lab's entry.
    update(lab, change) {
      try {
        const all = JSON.parse(localStorage.getItem(key)) || {};
        all[lab] = change(all[lab] || {});
        localStorage.setItem(key, JSON.stringify(all));
        return all;
      } catch (e) { return null; }
    },
    reset() {
      try { localStorage.removeItem(key); } catch (e) { /* nothing was kept */ }
    },
  };
  /* Scroll the code's pane (side by side, it has its own scrollbar) so a row is in it, a quarter
     down, without moving the page, and say true; elsewhere the pane does not scroll: false. */
  const showInPane = (row, smooth = true) => {
    const pane = row && row.closest(".code-pane");
    if (!pane || pane.scrollHeight <= pane.clientHeight) return false;
    const top = row.getBoundingClientRect().top - pane.getBoundingClientRect().top;
    if (top < 0 || top + row.offsetHeight > pane.clientHeight) {
      pane.scrollTo({ top: pane.scrollTop + top - pane.clientHeight / 4, behavior: smooth ? "smooth" : "auto" });
    }
    return true;
  };
  window.InfraLens = { $, $$, el, progress, showInPane };

  /* Theme: follows the OS until the reader picks one; the pick is kept in localStorage. */
  function setUpTheme() {
    const button = $(".theme-toggle"), osDark = matchMedia("(prefers-color-scheme: dark)");
    if (!button) return;
    const dark = () => (html.dataset.theme ? html.dataset.theme === "dark" : osDark.matches);
    const show = () => button.setAttribute("aria-pressed", dark());
    button.onclick = () => {
      html.dataset.theme = dark() ? "light" : "dark";
      try { localStorage.setItem("infralens-theme", html.dataset.theme); } catch (e) { /* private mode: this page only */ }
      show();
    };
    osDark.addEventListener("change", show);
    button.hidden = false;
    show();
  }

  /* Search: its script, styles and index load on first use, so they weigh nothing on a page's load. */
  function setUpSearch() {
    const box = $("[data-search-index]");
    if (!box || !staticSrc) return;
    const input = $("input", box);
    let asked = false;
    const load = () => {
      if (asked) return;
      asked = true;
      doc.head.append(el("link", { rel: "stylesheet", href: staticSrc + "search.css" }), el("script", { src: staticSrc + "search.js" }));
    };
    input.addEventListener("focus", load);
    input.addEventListener("pointerenter", load);
    doc.addEventListener("keydown", (event) => {
      const typing = /^(INPUT|TEXTAREA|SELECT)$/.test(event.target.tagName) || event.target.isContentEditable;
      if (event.key === "/" && !typing && !event.ctrlKey && !event.metaKey && !event.altKey) {
        event.preventDefault();
        input.focus();
      }
    });
    box.hidden = false;
  }

  /* The reader (reader.js: selecting key blocks and lines, the note and execution-state panels)
     loads when the reader reaches for the code or the notes, or follows a link to a line or note,
     so it weighs nothing on the page's load. A click that comes before it has loaded is kept and
     handled once it has. */
  function setUpReaderLoader() {
    const listing = $(".excerpt") || $(".page-source pre.code");
    if (!listing || !readerSrc) return;
    const zones = [listing, ...$$(".key-blocks"), $(".bound-notes")].filter(Boolean);
    let asked = false;
    // Its stylesheet first: the reader draws its panels as soon as it runs, and one drawn before
    // their styles arrive shows for a moment where it should not (a note's panel beside the note).
    const load = () => {
      if (asked) return;
      asked = true;
      const run = () => doc.head.append(el("script", { src: readerSrc }));
      doc.head.append(el("link", { rel: "stylesheet", href: staticSrc + "reader.css", onload: run, onerror: run }));
    };
    const early = (event) => {
      if (window.InfraLensReader) return;
      const link = event.target.closest("a");
      // Other links, and controls such as a listing's Copy button, just work.
      if (link ? !link.matches(".ln, .kb-badge, .kb-link, .kb-lines a, [data-lines]") : !event.target.closest("pre.code, .key-block")) return;
      event.preventDefault();
      event.stopPropagation();
      window.InfraLensEarlyClick = event;
      load();
    };
    zones.forEach((zone) => {
      zone.addEventListener("click", early, true);
      ["pointerover", "focusin", "touchstart"].forEach((type) => zone.addEventListener(type, load, { passive: true }));
    });
    window.InfraLensReaderZones = { zones, early };
    if (/^#((s\d+-)?L\d|kb-)/.test(location.hash)) load();
    addEventListener("hashchange", load);
  }

  /* Calculators: "Open the calculator" (or a link to one, #calc-ID) loads the form's styles and
     scripts (static/calc-form.css, static/calculator.js, the calculators.js beside the lab page)
     on first use. */
  function setUpCalculators() {
    const blocks = $$("[data-calc]");
    let loading;
    const open = (block, focus) => {
      loading = loading || new Promise((done) => doc.head.append(
        el("link", { rel: "stylesheet", href: staticSrc + "calc-form.css" }),
        el("script", { src: staticSrc + "calculator.js", async: false }),
        el("script", { src: "calculators.js", async: false, onload: done }),  // beside the lab page
      ));
      loading.then(() => InfraLensCalc.open(block, focus));
    };
    const followed = () => blocks.forEach((b) => location.hash.split("?")[0] === "#calc-" + b.dataset.calc && open(b));
    blocks.forEach((block) => {
      const offer = $(".calc-open", block);
      offer.hidden = false;
      offer.firstChild.onclick = () => open(block, true);
    });
    addEventListener("hashchange", followed);
    followed();
  }

  /* Progress (a lab page marks its lab seen), shown beside the links to labs of the navigation, the
     index's cards and a lab's practice link (a link names its lab by its address). static/index.js
     sums it up and resets it. */
  function setUpProgress() {
    const lab = doc.body.dataset.lab, all = lab ? progress.update(lab, (mine) => ({ ...mine, seen: 1 })) : progress.read();
    if (!all) return;
    $$(".sidenav li a, .lab-card-link, .practice-link").forEach((link) => {
      const mine = all[(link.pathname.match(/labs\/([^/]+)\/\w+\.html$/) || [])[1]], asked = link.dataset.questions;
      if (!mine) return;
      const got = Object.values(mine.q || {}).filter((v) => v > 1).length;
      link.append(
        el("span", { className: "mark", ariaHidden: "true" }, asked ? "✓ " + got + "/" + asked : "✓"),  // the words below say it
        el("span", { className: "sr" }, " (visited" + (asked ? ", " + got + " of " + asked + " questions right" : "") + ")"),
      );
    });
  }

  /* Side by side, at 75rem and wider (.side, set before first paint by base.html): the notes leave
     their list for a column beside the code, in order, and scroll past the code's pane. The note
     at the reading line (two fifths down the window) is current: its lines are marked and the pane
     scrolls them into view unless the reader has selected lines of their own. Narrower (or printed),
     the notes go back under the code. */
  function setUpSide() {
    const figure = $(".excerpt"), notes = $$(".key-block"), wide = matchMedia("screen and (min-width:75rem)");
    if (!figure || !notes.length) return;
    const pane = $(".code-pane", figure), rows = $$("code > span", figure);
    const column = el("ol", { className: "key-blocks side-notes" }), homes = notes.map((n) => [n, n.parentNode, n.nextSibling]);
    const section = notes[0].closest("section"), box = (node) => node.getBoundingClientRect();
    const line = (row) => +row.id.replace(/^.*L/, ""), file = (id) => id.replace(/^#|L\d+$/g, "");  // L12, or s2-L12 in a walkthrough's other file
    const linesOf = (n) => {  // a note's rows: its link names the file (#s2-L12), data-lines its lines
      const link = $("[data-lines]", n), [a, b] = link.dataset.lines.split("-");
      return rows.filter((row) => file(row.id) === file(link.hash) && line(row) >= a && line(row) <= +b);
    };
    let current = null;
    const follow = () => {
      if (!wide.matches) return;
      const reading = innerHeight * 0.4, boxes = notes.map(box);  // every box read before anything is set
      const at = notes.find((n, i) => boxes[i].top <= reading && boxes[i].bottom >= reading)
        || notes.filter((n, i) => boxes[i].bottom < reading).pop() || notes[0];
      if (at === current) return;
      current = at;
      notes.forEach((n) => n.classList.toggle("current", n === at));
      const mine = linesOf(at);
      rows.forEach((row) => row.classList.toggle("near", mine.includes(row)));
      if (!$("code > span.sel", figure) && mine.length) InfraLens.showInPane(mine[0]);
    };
    const lay = () => {
      const on = wide.matches;
      html.classList.toggle("side", on);
      section.hidden = on && !$(".calc", section);
      current = null;
      if (!on) {
        rows.forEach((row) => row.classList.remove("near"));
        return column.remove(), homes.forEach(([n, parent, next]) => parent.insertBefore(n, next));
      }
      figure.append(column);
      column.append(...notes);
      follow();
    };
    wide.onchange = lay;
    addEventListener("scroll", follow, { passive: true });
    lay();
  }

  /* Copy buttons: the copied text is the code alone (numbers and badges are CSS content). */
  function copyText(text) {
    if (navigator.clipboard && isSecureContext) return navigator.clipboard.writeText(text);
    const area = el("textarea", { value: text, readOnly: true });
    area.style.cssText = "position:fixed;opacity:0";
    doc.body.append(area);
    area.select();
    const done = doc.execCommand("copy");
    area.remove();
    return done ? Promise.resolve() : Promise.reject(new Error("copy refused"));
  }

  function setUpCopy() {
    $$("pre.code, .sample-output pre").forEach((pre) => {
      const frame = el("div", { className: "code-frame" }), what = pre.getAttribute("aria-label") || "Output";
      const button = el("button", { type: "button", className: "copy" }, "Copy");
      button.setAttribute("aria-label", "Copy " + what[0].toLowerCase() + what.slice(1));
      pre.before(frame);
      frame.append(pre, button);
      button.onclick = () => {
        copyText(pre.textContent).then(() => { button.textContent = "Copied"; }, () => { button.textContent = "Press Ctrl+C"; });
        setTimeout(() => { button.textContent = "Copy"; }, 1600);
      };
    });
  }

  const start = () => { setUpTheme(); setUpSearch(); setUpCopy(); setUpReaderLoader(); setUpCalculators(); setUpProgress(); setUpSide(); };
  if (doc.readyState === "loading") doc.addEventListener("DOMContentLoaded", start); else start();
})();
