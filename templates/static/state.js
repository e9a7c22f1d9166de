/* InfraLens execution state panel. Loaded on a reader's first selection of lines or a note, before
   the lab's recorded state (state.js beside the page, which calls InfraLensState). For the
   selected lines it lists what the checked run recorded: a function's inputs (⬇) and return (↩),
   what each line bound (⬆), the branch a condition took (⑂) and what a return line returned (↩).
   A function called several times, or a line run many times, kept its first runs and its last:
   the reader steps through them (‹ call 2 of 5 ›). Inside a loop, a step is one iteration of it
   (‹ iteration 2 of 496 · i = 1 ›): every selected line shows what it held at that moment, the
   same iteration of the same call, never a run of another one beside it. Counts and "at return" read as on the line ends
   (lab/state.py's wording, "≥" for a lower bound), each said once more in a sentence; a selected
   line with nothing to show says why. */
(() => {
  const doc = document, { el } = InfraLens;
  let data = null, panel = null, body = null, live = null, wanted = null, at = 0;

  const lineOf = (row) => +row.id.slice(1);
  const fmt = (n) => n.toLocaleString("en-US");
  const tot = (e) => (e.x ? "" : "≥ ") + fmt(e.c);
  const ranges = (ns) => ns.map((n) => "line " + n).join(", ");

  /* What a line's shown sample means, in words: where the value was taken, how often the line ran. */
  function note(e, s) {
    const call = s.k && e.a > 1 ? " call " + fmt(s.k) + " of " + fmt(e.a) : s.k ? " the call" : " the script";
    const which = s.k && e.a > 1 ? ", in call " + fmt(s.k) + " of " + fmt(e.a) : "";
    const names = s.v.map(([name]) => "`" + name + "`").join(", ") || "it";
    const out = [];
    if (s.at) out.push(`The tracer counted ${fmt(e.c)} runs of this line, then let the run go on untraced to keep it fast; the value is what ${names} held when${call} ${s.k ? "returned" : "ended"}.`);
    else if (!e.x) out.push(`At least ${fmt(e.c)} runs: some went untraced, to keep the run fast; shown: run ${fmt(s.n)}${which}.`);
    if (e.t) out.push(`True ${fmt(e.t[0])} times, false ${fmt(e.t[1])} times, in the runs traced.`);
    return out.join(" ");
  }

  /* The loop to step through: the innermost one around every selected line, else the first one
     the selection holds (data.o keeps only loops with more than one iteration kept). */
  function loopOf(numbers) {
    const loops = Object.entries(data.o || {}).map(([h, e]) => [+h, e]);
    const lo = Math.min(...numbers), hi = Math.max(...numbers);
    return loops.filter(([h, e]) => h <= lo && hi <= e.e).sort((a, b) => b[0] - a[0])[0]
      || loops.filter(([h]) => numbers.includes(h)).sort((a, b) => a[0] - b[0])[0];
  }

  /* The runs to step through: a selected function's calls, else a loop's iterations, else the runs
     of the busiest line. */
  function steps(numbers) {
    const call = numbers.map((n) => data.calls[n]).find((entry) => entry && entry.s.length > 1);
    if (call) return { kind: "call", count: call.c, exact: call.x, list: call.s.map((s) => s.k) };
    const loop = numbers.length && loopOf(numbers);
    if (loop) {
      const [h, e] = loop;
      return { kind: "iteration", count: e.c, exact: e.x, list: e.s.map((s) => (s.l ? s.l[s.l.length - 1] : e.c)), at: e.s.map((s) => s.at), h, loop: e };
    }
    const busiest = numbers.map((n) => data.lines[n]).filter((entry) => entry && entry.s.length > 1)
      .sort((a, b) => b.s.length - a.s.length)[0];
    if (!busiest) return null;
    const calls = new Set(busiest.s.map((s) => s.k));
    return { kind: calls.size > 1 ? "run" : "iteration", count: busiest.c, exact: busiest.x, list: busiest.s.map((s) => s.n), at: busiest.s.map((s) => s.at), entry: busiest };
  }

  const latest = (list) => list.reduce((a, b) => (b.t > a.t ? b : a), list[0]) || null;

  /* A line's sample at a loop's iteration: in the loop, its run of that iteration (the latest one,
     for a line of an inner loop); before it, its latest run of the same call, when no later kept run
     shows that one was not the last before the iteration; at return, what it held then. */
  function inLoop(entry, step, n) {
    const S = step.loop.s[at], inside = n >= step.h && n <= step.loop.e;
    if (S.at) {
      const held = latest(entry.s.filter((s) => s.k === S.k && s.at));
      const last = latest(entry.s.filter((s) => s.k === S.k));
      return held || (last && (!inside || last.n === entry.c) ? last : null);
    }
    const d = S.l.length - 1;
    if (inside) return latest(entry.s.filter((s) => s.l && s.l.length > d && s.l[d] === S.l[d]));
    const before = latest(entry.s.filter((s) => s.k === S.k && !s.at && s.t < S.t));
    return before && ((before.n === entry.c && entry.x) || entry.s.some((s) => s.n === before.n + 1 && s.t > S.t)) ? before : null;
  }

  /* The sample of an entry to show at this step: of the chosen call, of the chosen iteration, else
     at the same place. */
  function sampleOf(entry, step, isCall, n) {
    if (!step) return entry.s[entry.s.length - 1];
    if (step.kind === "call") {
      const k = step.list[at];
      const found = entry.s.filter((s) => s.k === k);
      return found.length ? found[found.length - 1] : null;
    }
    if (step.loop && !isCall) return inLoop(entry, step, n);
    if (isCall || entry.s.length === 1) return entry.s[entry.s.length - 1];
    return entry.s[Math.min(at, entry.s.length - 1)];
  }

  /* Why a selected line shows nothing at this step. */
  function absent(entry, step, n, shown) {
    if (step && step.kind === "call") return "not run in this call";
    // A condition shown false at this step whose body holds the line: it did not run, and why.
    const held = Object.entries(data.g || {}).find(([h, [first, last]]) => first <= n && n <= last && shown[h] && shown[h].b === false);
    if (held) return `did not run ${step && step.loop ? "in this iteration" : "then"}: the condition on line ${held[0]} was false`;
    if (step && step.loop && step.loop.s[at].at) return "not known at return: tracing had stopped, and only what each name held when the call returned was kept";
    if (step && step.loop) return entry.c > entry.s.length || !entry.x ? "not kept for this iteration" : "did not run in this iteration";
    return "not recorded";
  }

  /* The step bar's words: which iteration (or call, or run), and for a loop's iteration its call
     and the loop indices then ("iteration 2 of 496 · call 1 of 64 · h = 0, i = 1"). */
  function stepLabel(step, of) {
    const text = step.at && step.at[at] ? `at return, after ${of} ${step.kind}s` : `${step.kind} ${fmt(step.list[at])} of ${of}`;
    if (!step.loop) return text;
    const s = step.loop.s[at];
    const more = [s.k && step.loop.a > 1 ? `call ${fmt(s.k)} of ${fmt(step.loop.a)}` : "", s.v.map(([name, value]) => `${name} = ${value}`).join(", ")];
    return [text, ...more.filter(Boolean)].join(" · ");
  }

  function item(list, mark, label, name, value, means) {
    const what = el("span", { className: "st-what" }, label + " ", el("code", {}, name));
    const row = el("li", {}, el("span", { className: "st-mark" }, mark), " ", what, " = ", el("span", { className: "st-value" }, value));
    if (means) row.append(el("span", { className: "st-means" }, " — " + means));
    list.append(row);
  }

  /* What the manifest says the values of line n mean, by name (its key blocks' `meaning:`). */
  const meaningsAt = (n) => Object.assign({}, ...(data.m || []).filter(([a, b]) => a <= n && n <= b).map((m) => m[2]));

  function render() {
    if (!panel) {
      panel = el("section", { className: "state-panel" });
      panel.setAttribute("aria-label", "Execution state");
      // The step is announced from a region that stays, so screen readers hear each change.
      live = el("p", { className: "st-live" });
      live.setAttribute("aria-live", "polite");
      body = el("div");
      panel.append(body, live);
      wanted.dock.append(panel);
    }
    const all = wanted.rows.map(lineOf), numbers = all.filter((n) => data && (data.lines[n] || data.calls[n]));
    panel.hidden = !data || !all.length;
    if (panel.hidden) return;
    const step = steps(numbers);
    if (step) at = Math.min(at, step.list.length - 1);
    body.replaceChildren();
    body.append(el("p", { className: "st-head" }, el("strong", {}, "Execution state"), " ",
      el("span", { className: "st-run" }, `recorded by the checked run of ${data.run.slice(0, 10)}${data.truncated ? " (truncated)" : ""}`)));
    if (step) {
      const bar = el("p", { className: "st-step" });
      const prev = el("button", { type: "button", className: "st-prev" }, "‹"), next = el("button", { type: "button", className: "st-next" }, "›");
      prev.setAttribute("aria-label", `Previous ${step.kind}`);
      next.setAttribute("aria-label", `Next ${step.kind}`);
      prev.disabled = at === 0;
      next.disabled = at === step.list.length - 1;
      // Keep the focus on the button pressed, or on the other one once this end is reached.
      const go = (delta, own, other) => {
        at += delta;
        render();
        const button = panel.querySelector(own);
        (button.disabled ? panel.querySelector(other) : button).focus();
        live.textContent = panel.querySelector(".st-at").textContent;
      };
      prev.onclick = () => go(-1, ".st-prev", ".st-next");
      next.onclick = () => go(1, ".st-next", ".st-prev");
      const of = tot({ c: step.count, x: step.exact });
      const label = el("span", { className: "st-at" }, stepLabel(step, of));
      bar.append(prev, " ", label, " ", next);
      if (step.list.length < step.count) bar.append(" ", el("span", { className: "st-kept" }, `(${step.list.length} of ${of} kept)`));
      body.append(bar);
    }
    const shown = {};  // each line's sample at this step, so a body's line can name its false condition
    for (const n of numbers) {
      const row = doc.getElementById("L" + n), box = el("div", { className: "st-line" });
      const title = el("p", { className: "st-title" });
      const link = el("a", { href: "#L" + n }, `Line ${n}`);
      title.append(link, " ", el("code", {}, row.textContent.trim().slice(0, 90)));
      const where = (data.calls[n] || data.lines[n]).p;
      if (where) title.append(" ", el("span", { className: "st-where" }, `in ${where}`));
      box.append(title);
      const list = el("ul", { className: "st-values" });
      const call = data.calls[n], line = data.lines[n];
      const c = call && sampleOf(call, step, true, n), s = line && sampleOf(line, step, false, n);
      const means = meaningsAt(n);
      if (s) shown[n] = s;
      if (c) {
        c.i.forEach(([name, value]) => item(list, "⬇", "input", name, value, means[name]));
        if (c.r !== null) item(list, "↩", "returned", "return", c.r);
      }
      if (s) {
        s.v.forEach(([name, value]) => item(list, "⬆", "bound", name, value, means[name]));
        if ("b" in s) item(list, "⑂", "branch", "condition", s.b ? "true" : "false");
        if ("r" in s) item(list, "↩", "returned", "return", s.r);
      }
      if (!c && !s) list.append(el("li", { className: "st-none" }, absent(line || call, step, n, shown)));
      const runs = (call || line).c;
      if (runs > 1 && !step) box.append(el("p", { className: "st-runs" }, !line || call ? "last of " + fmt(runs) + " calls"
        : s.at ? "at return, after " + tot(line) + " runs" : s.n === runs && line.x ? "last of " + fmt(runs) + " runs" : "run " + fmt(s.n) + " of " + tot(line)));
      box.append(list);
      const words = s && note(line, s);
      if (words) box.append(el("p", { className: "st-note" }, words));
      body.append(box);
    }
    // The figures the manifest derives from these lines' values, computed by the build from the
    // values the run ended with (said so while another step is shown).
    const figures = (data.d || []).filter(([a, b]) => all.some((n) => a <= n && n <= b)).flatMap((d) => d[2]);
    if (figures.length) {
      const list = el("ul", { className: "st-values" });
      figures.forEach(([name, formula, value, means]) => item(list, "=", "derived", name, `${formula} = ${value}`, means));
      const last = !step || at === step.list.length - 1;
      body.append(el("div", { className: "st-derived" }, el("p", { className: "st-title" }, "Derived" + (last ? "" : ", from the values at the end of the run")), list));
    }
    // No line of the selection is left out without a reason.
    const quiet = all.filter((n) => !numbers.includes(n)), w = new Set(data.w || []);
    const idle = quiet.filter((n) => w.has(n)), blank = quiet.filter((n) => !w.has(n));
    if (idle.length) body.append(el("p", { className: "st-none" }, `Not recorded: ${ranges(idle)} did not run in the checked run${data.truncated ? ", or were cut from its state (truncated)" : ""}.`));
    if (blank.length && (!numbers.length || blank.length < 4)) body.append(el("p", { className: "st-none" }, `Nothing to record on ${ranges(blank)}: no name bound, no condition, call or return starts there.`));
  }

  window.InfraLensState = (recorded) => { data = recorded; if (wanted) render(); };
  window.InfraLensStatePanel = {
    show(selection) {
      const ids = (rows) => rows.map((row) => row.id).join();
      if (!wanted || ids(selection.rows) !== ids(wanted.rows)) at = 0;
      wanted = selection;
      if (data) render();
    },
  };
  const pending = window.InfraLensPending && window.InfraLensPending();
  if (pending) wanted = pending;
})();
