/* InfraLens questions: grade a reader's answer against the checked run's figure, on a lab's
   practice page (which loads this file; without it, each answer is a details reveal). A number is read as infralens/lab/questions.py `reading` reads what the
   run printed (a browser test holds the two to one table). Each result is kept in this browser's
   progress (InfraLens.progress, infralens.js); nothing leaves the browser. */
(() => {
  const doc = document, { el, progress } = InfraLens;
  const PREFIXES = {
    k: 1e3, K: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15,
    Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50,
    m: 1e-3, u: 1e-6, "µ": 1e-6, n: 1e-9,
  };
  const NUMBER = /^([+-]?)(\d{1,3}(?:,\d{3})+|\d+)?(?:\.(\d*))?(?:[eE]([+-]?\d+))?/;

  function multiplier(rest, unit) {
    if (unit === "B") rest = rest.replace(/bytes?$/, "B");
    if (unit === "x") rest = rest.replace(/×/g, "x");
    if (!rest) return 1;
    if (unit && rest.endsWith(unit)) {
      rest = rest.slice(0, rest.length - unit.length).trim();
      if (!rest) return 1;
    }
    return Object.hasOwn(PREFIXES, rest) ? PREFIXES[rest] : null;
  }

  /* "2 GiB", "2.15e9", "2,147,483,648" → {value, half}: the number in `unit`, and half the step of
     its last written digit; null when it is not a number in that unit. */
  function reading(text, unit) {
    text = text.replace(/[_\u2009\u202f]/g, "").trim().replace(/\s+/g, " ");
    const m = NUMBER.exec(text);
    if (!m || !(m[2] || m[3])) return null;
    const value = Number(m[1] + (m[2] || "0").replace(/,/g, "") + "." + (m[3] || "") + (m[4] ? "e" + m[4] : ""));
    const step = 10 ** (Number(m[4] || 0) - (m[3] || "").length);
    const times = multiplier(text.slice(m[0].length).trim(), unit);
    if (times === null || !isFinite(value * times) || !isFinite(step)) return null;
    return { value: value * times, half: (step * times) / 2 };
  }

  const percent = (x) => (x * 100).toLocaleString("en-US", { maximumSignificantDigits: 2 }) + "%";
  const times = (x) => (x < 10 ? x.toFixed(1) : Math.round(x).toLocaleString("en-US")) + "x";

  /* The verdict on a number: [kind, words]; kind is "exact", "close" or "off". */
  function grade(got, answer, half, tolerance) {
    const miss = Math.abs(got - answer), size = Math.abs(answer);
    if (miss <= half + 1e-12 * size) return ["exact", "Right: that is the checked run's figure."];
    if (miss <= tolerance * size) return ["close", `Close: within ${percent(tolerance)} of the checked run's figure (off by ${percent(miss / size)}).`];
    if (got && answer && Math.sign(got) === Math.sign(answer)) {
      const ratio = got / answer;
      return ["off", `Off by ${times(ratio > 1 ? ratio : 1 / ratio)}, too ${ratio > 1 ? "high" : "low"}.`];
    }
    return ["off", answer ? `Off: the answer is ${answer > 0 ? "positive" : "negative"}.` : "Off: the answer is zero."];
  }

  // A question once answered right stays right. Storage off or full: the verdict still shows.
  function keep(form, right) {
    progress.update(doc.body.dataset.lab, (mine) => {
      const q = { ...mine.q }, id = form.dataset.q;
      q[id] = Math.max(q[id] || 0, right ? 2 : 1);
      return { ...mine, q };
    });
  }

  function say(form, kind, words, why) {
    let out = form.nextElementSibling;
    if (!out || !out.matches(".q-verdict")) {
      out = el("p", { className: "q-verdict" });
      out.setAttribute("role", "status");
      form.after(out);
    }
    out.className = "q-verdict " + kind;
    out.replaceChildren(el("strong", {}, words));
    if (why) out.append(" ", ...why.cloneNode(true).childNodes);
  }

  function check(form) {
    if (form.dataset.right !== undefined) {
      const picked = form.querySelector("input:checked");
      if (!picked) return say(form, "off", "Pick a choice first.");
      const right = picked.value === form.dataset.right;
      const why = form.parentNode.querySelectorAll(".q-reveal .q-why")[Number(picked.value)];
      keep(form, right);
      return say(form, right ? "exact" : "off", right ? "Right." : "Not this one.", why);
    }
    const input = form.querySelector("input"), unit = form.dataset.u || "";
    const got = reading(input.value, unit);
    input.setAttribute("aria-invalid", got === null && input.value.trim() !== "");
    if (got === null) {
      return say(form, "off", input.value.trim() ? `“${input.value.trim()}” is not a number${unit ? " in " + unit : ""}.` : "Type an answer first.");
    }
    const [kind, words] = grade(got.value, Number(form.dataset.a), Number(form.dataset.h), Number(form.dataset.t));
    keep(form, kind !== "off");
    say(form, kind, words);
  }

  doc.addEventListener("submit", (event) => {
    if (!event.target.matches(".q-form")) return;
    event.preventDefault();
    check(event.target);
  });
  window.InfraLensQuestions = { check, reading, grade };
})();
