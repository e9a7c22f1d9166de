/* InfraLens reader, loaded by infralens.js when a reader first reaches for the code or the notes:
   selecting a key block (#kb-name, lab pages) or lines (#L12, #L12-L18), the note panel under the
   code, and the execution-state panel's loader. Uses window.InfraLens (infralens.js). */
(() => {
  const doc = document, { $, $$, el } = InfraLens;
  // Its panels' styles (reader.css) are in the page before it runs: infralens.js loads them first.

  /* The reader. A selection is a key block (#kb-name, lab pages) or lines (#L12, #L12-L18). */
  // `listing` holds the code: a lab page's excerpt (every step of a walkthrough), or the source view's.
  // A row's id is its line (L12), after its file's prefix in a walkthrough's other files (s2-L12).
  let listing = null, panel = null, anchor = null;
  const rows = () => (listing ? $$("pre.code > code > span", listing) : []);
  const lineOf = (row) => +row.id.replace(/^.*L/, "");
  const fileOf = (row) => row.id.replace(/L\d+$/, "");
  const blocks = () => $$(".key-block");
  const slugOf = (block) => block.id.slice(3);
  // A note names its lines (data-lines="A-B" on its line link); it is bound to the rows in that range.
  const within = (note, row) => {
    const link = $("[data-lines]", note), [a, b] = link.dataset.lines.split("-");
    return fileOf(row) === link.hash.slice(1).replace(/L\d+$/, "") && lineOf(row) >= a && lineOf(row) <= +b;
  };
  const boundTo = (slug) => { const note = doc.getElementById("kb-" + slug); return note ? rows().filter((row) => within(note, row)) : []; };
  const active = () => blocks().find((block) => block.classList.contains("active"));

  function mark(chosen, block) {
    away(null);
    rows().forEach((row) => row.classList.toggle("sel", chosen.includes(row)));
    blocks().forEach((b) => b.classList.toggle("active", b === block));
    placeDock(block);
    showNote(block);
    showState(chosen, block);
  }

  /* Under the code, the dock is a sheet at the window's bottom; side by side it sits in the selected
     note, beside its lines, or above the notes for lines chosen by number. */
  function placeDock(block) {
    const dock = panel && panel.parentNode, figure = listing && listing.closest(".excerpt");
    if (!dock || !figure) return;
    const side = doc.documentElement.classList.contains("side");
    if (side && block) block.append(dock);
    else if (dock.parentNode !== figure) figure.insertBefore(dock, $(".code-pane", figure).nextSibling);
  }

  /* Execution state: the panel's script and the lab's recorded values (state.js beside the page)
     load on the first selection. */
  let stateWanted = null;
  function showState(chosen, block) {
    const figure = listing && listing.closest("[data-state]");
    if (!figure) return;
    stateWanted = { rows: chosen, block, dock: panel.parentNode };
    if (window.InfraLensStatePanel) return InfraLensStatePanel.show(stateWanted);
    if (figure.dataset.stateAsked) return;
    figure.dataset.stateAsked = "1";
    for (const src of [figure.dataset.statePanel, figure.dataset.state]) {
      doc.head.append(el("script", { src, async: false }));  // in this order
    }
  }
  window.InfraLensPending = () => stateWanted;

  function setHash(hash) {
    if (location.hash !== hash) history.replaceState(null, "", hash || location.pathname + location.search);
  }

  /* Bring the first selected line into sight, never under a panel: side by side, the code's pane
     scrolls to it (and the page to the note); under the code, the line goes to the upper part of the
     window, above the dock, which is never taller than 45% of it. */
  function reveal(row, block) {
    if (!row) return;
    const pane = row.closest(".code-pane");
    if (doc.documentElement.classList.contains("side") && pane) {
      const target = block || pane, box = target.getBoundingClientRect();
      if (box.top < 0 || box.top > innerHeight * 0.6) scrollBy({ top: box.top - innerHeight * 0.15 });
      InfraLens.showInPane(row, false);
      return;
    }
    const box = row.getBoundingClientRect();
    if (box.top < innerHeight * 0.05 || box.bottom > innerHeight * 0.5) scrollBy({ top: box.top - innerHeight * 0.2 });
  }

  function selectLines(first, last, scroll, file = "") {
    [first, last] = [Math.min(first, last), Math.max(first, last)];
    const chosen = rows().filter((row) => fileOf(row) === file && lineOf(row) >= first && lineOf(row) <= last);
    if (!chosen.length) return away([first, last, file]), false;
    mark(chosen, null);
    setHash(first === last ? `#${file}L${first}` : `#${file}L${first}-L${last}`);
    if (scroll) reveal(chosen[0]);
    return true;
  }

  function selectBlock(slug, scroll) {
    const block = doc.getElementById("kb-" + slug);
    if (!block || !block.classList.contains("key-block") || !listing) return false;
    const chosen = boundTo(slug);
    mark(chosen, block);
    setHash("#kb-" + slug);
    if (scroll) reveal(chosen[0], block);
    return true;
  }

  /* The selected block's note, kept in sight under the code while the code is on screen. */
  function showNote(block) {
    if (!panel) return;
    panel.hidden = !block;
    if (!block) return;
    const all = blocks(), at = all.indexOf(block);
    $(".kb-panel-title", panel).innerHTML = $(".kb-link", block).innerHTML;
    $(".kb-panel-lines", panel).textContent = `Note ${at + 1} of ${all.length} · ${$(".kb-lines a", block).textContent}`;
    $(".kb-panel-note", panel).innerHTML = $(".kb-note", block).innerHTML;
    $(".kb-panel-prev", panel).disabled = at === 0;
    $(".kb-panel-next", panel).disabled = at === all.length - 1;
  }

  function buildPanel(figure) {
    panel = el("div", { className: "kb-panel", hidden: true });
    panel.setAttribute("role", "region");
    panel.setAttribute("aria-label", "Selected note");
    panel.setAttribute("aria-live", "polite");
    panel.innerHTML =
      '<p class="kb-panel-head"><span class="kb-panel-title"></span> <span class="kb-panel-lines"></span></p>' +
      '<div class="kb-panel-note"></div><p class="kb-panel-tools">' +
      '<button type="button" class="kb-panel-prev">Previous note</button>' +
      '<button type="button" class="kb-panel-next">Next note</button>' +
      '<button type="button" class="kb-panel-close">Close</button></p>';
    const dock = el("div", { className: "dock", tabIndex: -1 }, panel);
    figure.insertBefore(dock, $("figcaption", figure));
    const step = (delta) => {
      const all = blocks(), next = all[all.indexOf(active()) + delta];
      if (next) selectBlock(slugOf(next), true);
    };
    $(".kb-panel-prev", panel).onclick = () => step(-1);
    $(".kb-panel-next", panel).onclick = () => step(1);
    $(".kb-panel-close", panel).onclick = () => { mark([], null); setHash(""); };
  }

  /* Lines asked for (#L3-L5) that the excerpt does not show: the whole file has them, so say so
     and link there, rather than doing nothing. */
  function away(asked) {
    const note = $(".kb-away"), dock = panel && panel.parentNode;
    if (note) note.remove();
    if (!asked || !dock) return;
    const [first, last, file] = asked, one = rows().find((row) => fileOf(row) === file);
    const step = one && one.closest(".code-frame").previousElementSibling;
    const link = (step && step.matches(".step-head") ? $("a", step) : $("figcaption a", listing.closest(".excerpt") || doc));
    if (!link) return;
    const lines = first === last ? `Line ${first}` : `Lines ${first}–${last}`;
    const to = el("a", { href: link.href.replace(/#.*$/, "") + (first === last ? `#L${first}` : `#L${first}-L${last}`) }, `open ${lines.toLowerCase()} in the whole file`);
    dock.prepend(el("p", { className: "kb-away" }, `${lines} ${first === last ? "is" : "are"} not in this excerpt: `, to, "."));
  }

  /* Keys: Esc closes the selection; in the panel, ← and → step (through the state's runs, or the
     notes); on the code, ↑ and ↓ move a one-line selection (Shift widens it), so every line can
     be chosen without a pointer. */
  function onKey(event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const dock = panel && panel.parentNode, inDock = dock && dock.contains(event.target);
    if (event.key === "Escape" && (active() || $("code > span.sel", listing))) {
      const back = active() && $(".kb-link", active()), inside = inDock || (active() && active().contains(event.target));
      mark([], null);
      setHash("");
      if (inside) (back || listing).focus();
      return;
    }
    if (inDock && (event.key === "ArrowLeft" || event.key === "ArrowRight")) {
      const forward = event.key === "ArrowRight";
      const button = $(forward ? ".st-next" : ".st-prev", dock) || $(forward ? ".kb-panel-next" : ".kb-panel-prev", dock);
      if (button && !button.disabled) { event.preventDefault(); button.click(); }
      return;
    }
    const pre = event.target.closest && event.target.closest("pre.code");
    if (pre && listing.contains(pre) && (event.key === "ArrowDown" || event.key === "ArrowUp")) {
      const all = $$("code > span", pre), chosen = all.filter((row) => row.classList.contains("sel"));
      const edge = event.key === "ArrowDown" ? chosen[chosen.length - 1] : chosen[0];
      const next = edge ? all[all.indexOf(edge) + (event.key === "ArrowDown" ? 1 : -1)] : all[0];
      if (!next) return;
      event.preventDefault();
      if (!event.shiftKey || anchor === null || anchor[0] !== fileOf(next)) anchor = [fileOf(next), lineOf(next)];
      selectLines(anchor[1], lineOf(next), false, anchor[0]);
      if (!InfraLens.showInPane(next, false)) next.scrollIntoView({ block: "nearest" });
    }
  }

  /* The smallest key block bound to a row; clicking it again moves on to the next one there. */
  function blockForRow(row) {
    const slugs = blocks().filter((note) => within(note, row)).map(slugOf);
    const current = slugs.indexOf(active() && slugOf(active()));
    if (current >= 0) return slugs[(current + 1) % slugs.length];
    return slugs.sort((a, b) => boundTo(a).length - boundTo(b).length)[0];
  }

  function onListingClick(event) {
    const link = event.target.closest("a"), row = event.target.closest("pre.code > code > span");
    if (!row) return;
    const onNumber = link ? link.classList.contains("ln")
      : event.target === row && event.clientX - row.getBoundingClientRect().left < 5.1 * parseFloat(getComputedStyle(row).fontSize);  // the gutter, 5.1em (a wrapped line's padding is wider)
    if (onNumber) {
      event.preventDefault();
      // Touch has no Shift: a tap on a second number, while one line is selected, makes the range.
      const one = $$("code > span.sel", listing).length === 1, widen = event.shiftKey || (event.pointerType === "touch" && one);
      if (!widen || anchor === null || anchor[0] !== fileOf(row)) anchor = [fileOf(row), lineOf(row)];
      selectLines(anchor[1], lineOf(row), false, anchor[0]);
    } else if (link && link.classList.contains("kb-badge") && link.hash && link.pathname === location.pathname) {
      event.preventDefault();
      selectBlock(link.hash.slice(4), false);
    } else if (!link && panel && !String(getSelection())) {  // leave text selection alone
      const slug = blockForRow(row);
      if (slug) selectBlock(slug, false);
    }
  }

  function onBlockClick(event) {
    const block = event.target.closest(".key-block"), link = event.target.closest("a");
    if (!block || (link && !link.matches(".kb-link, .kb-lines a")) || (!link && String(getSelection()))) return;
    event.preventDefault();
    selectBlock(slugOf(block), true);
    // From the keyboard (a click with no pointer behind it), the focus follows into the panel.
    const dock = panel && panel.parentNode;
    if (event.detail === 0 && link && dock) dock.focus({ preventScroll: true });
  }

  function followHash(scroll) {
    let hash;
    try { hash = decodeURIComponent(location.hash.slice(1)); } catch (e) { return false; }  // a mangled link
    const range = /^(s\d+-)?L(\d+)(?:-L?(\d+))?$/.exec(hash);
    if (range) return selectLines(+range[2], +(range[3] || range[2]), scroll, range[1] || "");
    return hash.startsWith("kb-") && selectBlock(hash.slice(3), scroll);
  }

  function setUpReader() {
    const figure = $(".excerpt");
    listing = figure || $(".page-source pre.code");
    if (!listing) return;
    if (figure) buildPanel(figure);
    listing.addEventListener("click", onListingClick);
    doc.addEventListener("click", onBlockClick);  // notes may stand beside the code, or under it in several lists
    $$(".bound-notes a[data-lines]").forEach((link) => {
      link.onclick = (event) => {
        event.preventDefault();
        const [first, last] = link.dataset.lines.split("-");
        selectLines(+first, +last, true);
      };
    });
    addEventListener("hashchange", () => followHash(true));
    doc.addEventListener("keydown", onKey);
    // The browser jumps to a fragment's element once the page has loaded; show the code after that.
    if (followHash(false)) {
      const show = () => requestAnimationFrame(() => reveal($("code > span.sel", listing), active()));
      if (doc.readyState === "complete") show(); else addEventListener("load", show);
    }
  }


  setUpReader();
  const boot = window.InfraLensReaderZones;
  if (boot) boot.zones.forEach((zone) => zone.removeEventListener("click", boot.early, true));
  const early = window.InfraLensEarlyClick;
  if (early) {  // the click that asked for the reader: handle it now
    window.InfraLensEarlyClick = null;
    const replay = { target: early.target, clientX: early.clientX, shiftKey: early.shiftKey, detail: early.detail, pointerType: early.pointerType, preventDefault() {} };
    if (early.target.closest(".key-blocks")) onBlockClick(replay);  // a note, under the code or beside it
    else if (listing && listing.contains(early.target)) onListingClick(replay);
    else early.target.closest("a") && early.target.closest("a").click();
  }
  window.InfraLensReader = true;
})();
