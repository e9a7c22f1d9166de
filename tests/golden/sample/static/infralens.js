/* InfraLens reader: theme toggle, annotated code reader, line links, copy buttons.
   Progressive enhancement only: every page reads completely without this file. No dependencies. */
(function () {
  "use strict";
  var doc = document;
  var html = doc.documentElement;
  var THEME_KEY = "infralens-theme";

  function $(selector, scope) { return (scope || doc).querySelector(selector); }
  function $$(selector, scope) { return Array.prototype.slice.call((scope || doc).querySelectorAll(selector)); }

  /* Theme: follows the OS until the reader picks one; the pick is kept in localStorage. */
  function setUpTheme() {
    var button = $(".theme-toggle");
    if (!button) return;
    var osDark = window.matchMedia("(prefers-color-scheme: dark)");
    function dark() {
      var chosen = html.getAttribute("data-theme");
      return chosen ? chosen === "dark" : osDark.matches;
    }
    function show() { button.setAttribute("aria-pressed", dark() ? "true" : "false"); }
    button.addEventListener("click", function () {
      var next = dark() ? "light" : "dark";
      html.setAttribute("data-theme", next);
      try { localStorage.setItem(THEME_KEY, next); } catch (e) { /* private mode: the pick lasts this page */ }
      show();
    });
    if (osDark.addEventListener) osDark.addEventListener("change", show);
    button.hidden = false;
    show();
  }

  /* Navigation: open beside the page on wide screens, folded above it on narrow ones. */
  function setUpNav() {
    var nav = $(".sidenav-toggle");
    if (!nav) return;
    var narrow = window.matchMedia("(max-width: 60rem)");
    function fit() { nav.open = !narrow.matches; }
    fit();
    if (narrow.addEventListener) narrow.addEventListener("change", fit);
  }

  /* Line selection: #L12 or #L12-L18, on any listing; a key block: #kb-name, on a lab page. */
  var listing = null;   // the page's main listing: the lab's excerpt or the source view
  var panel = null;     // the note shown under the excerpt
  var anchorLine = null;

  function rows() { return listing ? $$(".row", listing) : []; }
  function lineOf(row) { return parseInt(row.id.slice(1), 10); }

  function mark(selected) {
    rows().forEach(function (row) { row.classList.toggle("sel", selected.indexOf(row) >= 0); });
  }

  function setHash(hash) {
    if (location.hash !== hash) history.replaceState(null, "", hash || location.pathname + location.search);
  }

  function reveal(row) {
    if (!row) return;
    var box = row.getBoundingClientRect();
    if (box.top < 0 || box.bottom > window.innerHeight * 0.6) row.scrollIntoView({ block: "center" });
  }

  function selectLines(first, last, scroll) {
    if (last < first) { var t = first; first = last; last = t; }
    var chosen = rows().filter(function (row) { var n = lineOf(row); return n >= first && n <= last; });
    if (!chosen.length) return false;
    mark(chosen);
    showNote(null);
    setHash(first === last ? "#L" + first : "#L" + first + "-L" + last);
    if (scroll) reveal(chosen[0]);
    return true;
  }

  function blocks() { return $$(".key-block"); }
  function slugOf(block) { return block.id.slice(3); }

  function selectBlock(slug, scroll) {
    var block = doc.getElementById("kb-" + slug);
    if (!block || !listing) return false;
    var chosen = rows().filter(function (row) { return (" " + (row.getAttribute("data-kb") || "") + " ").indexOf(" " + slug + " ") >= 0; });
    mark(chosen);
    blocks().forEach(function (b) { b.classList.toggle("active", b === block); });
    showNote(block);
    setHash("#kb-" + slug);
    if (scroll) reveal(chosen[0]);
    return true;
  }

  function clearSelection() {
    mark([]);
    blocks().forEach(function (b) { b.classList.remove("active"); });
    showNote(null);
    setHash("");
  }

  /* The note of the selected key block, shown right under the code while the code is on screen. */
  function showNote(block) {
    if (!panel) return;
    if (!block) { panel.hidden = true; return; }
    var all = blocks();
    var index = all.indexOf(block);
    var lines = $(".kb-lines a", block);
    $(".kb-panel-title", panel).innerHTML = $(".kb-link", block).innerHTML;
    $(".kb-panel-lines", panel).textContent = "Note " + (index + 1) + " of " + all.length + " · " + (lines ? lines.textContent : "");
    $(".kb-panel-note", panel).innerHTML = $(".kb-note", block).innerHTML;
    $(".kb-panel-prev", panel).disabled = index === 0;
    $(".kb-panel-next", panel).disabled = index === all.length - 1;
    panel.hidden = false;
  }

  function buildPanel(figure) {
    panel = doc.createElement("div");
    panel.className = "kb-panel";
    panel.hidden = true;
    panel.setAttribute("role", "region");
    panel.setAttribute("aria-label", "Selected note");
    panel.setAttribute("aria-live", "polite");
    panel.innerHTML =
      '<p class="kb-panel-head"><span class="kb-panel-title"></span> <span class="kb-panel-lines"></span></p>' +
      '<div class="kb-panel-note"></div>' +
      '<p class="kb-panel-tools"><button type="button" class="kb-panel-prev">Previous note</button>' +
      '<button type="button" class="kb-panel-next">Next note</button>' +
      '<button type="button" class="kb-panel-close">Close</button></p>';
    figure.insertBefore(panel, $("figcaption", figure));
    function step(delta) {
      var all = blocks();
      var current = all.filter(function (b) { return b.classList.contains("active"); })[0];
      var next = all[all.indexOf(current) + delta];
      if (next) selectBlock(slugOf(next), true);
    }
    $(".kb-panel-prev", panel).addEventListener("click", function () { step(-1); });
    $(".kb-panel-next", panel).addEventListener("click", function () { step(1); });
    $(".kb-panel-close", panel).addEventListener("click", clearSelection);
  }

  /* The most specific key block bound to a row; a second click on it moves to the next one. */
  function blockForRow(row) {
    var slugs = (row.getAttribute("data-kb") || "").split(" ").filter(Boolean);
    if (!slugs.length) return null;
    var current = blocks().filter(function (b) { return b.classList.contains("active"); }).map(slugOf)[0];
    var at = slugs.indexOf(current);
    if (at >= 0) return slugs[(at + 1) % slugs.length];
    var size = function (slug) { return rows().filter(function (r) { return (" " + r.getAttribute("data-kb") + " ").indexOf(" " + slug + " ") >= 0; }).length; };
    return slugs.sort(function (a, b) { return size(a) - size(b); })[0];
  }

  function onListingClick(event) {
    var link = event.target.closest("a");
    var row = event.target.closest(".row");
    if (!row) return;
    var onNumber = link ? link.classList.contains("ln") : event.target === row && event.clientX - row.getBoundingClientRect().left < parseFloat(getComputedStyle(row).paddingLeft);
    if (onNumber) {
      if (link) event.preventDefault();
      var n = lineOf(row);
      if (event.shiftKey && anchorLine !== null) selectLines(anchorLine, n, false);
      else { anchorLine = n; selectLines(n, n, false); }
      return;
    }
    if (link && link.classList.contains("kb-badge") && link.getAttribute("href").charAt(0) === "#") {
      event.preventDefault();
      selectBlock(link.getAttribute("href").slice(4), false);
      return;
    }
    if (link || !panel || String(window.getSelection()).length) return;  // leave text selection alone
    var slug = blockForRow(row);
    if (slug) selectBlock(slug, false);
  }

  function onBlockClick(event) {
    var block = event.target.closest(".key-block");
    var link = event.target.closest("a");
    if (!block || (link && !link.classList.contains("kb-link") && !link.hasAttribute("data-lines"))) return;
    if (!link && String(window.getSelection()).length) return;
    if (link) event.preventDefault();
    selectBlock(slugOf(block), true);
  }

  function followHash(scroll) {
    var hash = decodeURIComponent(location.hash.slice(1));
    var range = /^L(\d+)(?:-L?(\d+))?$/.exec(hash);
    if (range) return selectLines(+range[1], +(range[2] || range[1]), scroll);
    if (hash.indexOf("kb-") === 0) return selectBlock(hash.slice(3), scroll);
    return false;
  }

  function setUpReader() {
    var figure = $(".excerpt");
    listing = figure ? $("pre.code", figure) : $(".page-source pre.code");
    if (!listing) return;
    if (figure) buildPanel(figure);
    listing.addEventListener("click", onListingClick);
    var list = $(".key-blocks");
    if (list) list.addEventListener("click", onBlockClick);
    $$(".bound-notes a[data-lines]").forEach(function (link) {
      link.addEventListener("click", function (event) {
        event.preventDefault();
        var span = link.getAttribute("data-lines").split("-");
        selectLines(+span[0], +span[1], true);
      });
    });
    window.addEventListener("hashchange", function () { followHash(true); });
    // The browser scrolls to a fragment's element once the page has loaded; show the code after it.
    if (followHash(false)) {
      var show = function () { requestAnimationFrame(function () { reveal($(".row.sel", listing)); }); };
      if (doc.readyState === "complete") show(); else window.addEventListener("load", show);
    }
  }

  /* Copy buttons: the copied text is the code alone (line numbers and badges are CSS content). */
  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
    return new Promise(function (resolve, reject) {
      var area = doc.createElement("textarea");
      area.value = text;
      area.setAttribute("readonly", "");
      area.style.position = "fixed";
      area.style.opacity = "0";
      doc.body.appendChild(area);
      area.select();
      var done = doc.execCommand("copy");
      doc.body.removeChild(area);
      if (done) resolve(); else reject(new Error("copy refused"));
    });
  }

  function setUpCopy() {
    $$("pre.code, .sample-output pre").forEach(function (pre) {
      var frame = doc.createElement("div");
      frame.className = "code-frame";
      pre.parentNode.insertBefore(frame, pre);
      frame.appendChild(pre);
      var button = doc.createElement("button");
      button.type = "button";
      button.className = "copy";
      button.textContent = "Copy";
      button.setAttribute("aria-label", "Copy " + (pre.getAttribute("aria-label") || "output").replace(/^\w/, function (c) { return c.toLowerCase(); }));
      frame.appendChild(button);
      button.addEventListener("click", function () {
        copyText(pre.textContent).then(function () { button.textContent = "Copied"; }, function () { button.textContent = "Press Ctrl+C"; });
        setTimeout(function () { button.textContent = "Copy"; }, 1600);
      });
    });
  }

  function start() {
    setUpTheme();
    setUpNav();
    setUpCopy();
    setUpReader();
  }
  if (doc.readyState === "loading") doc.addEventListener("DOMContentLoaded", start); else start();
})();
