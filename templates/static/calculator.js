/* InfraLens calculators' arithmetic: the helpers expressions compiled by infralens/model/expr.py call
   (`X.add(a, b)`, `X.floordiv(a, b)`, ...). They follow Python's rules where the page must agree
   with the build (// floors, % takes the divisor's sign, whole powers are exact) and refuse what
   the build refuses: division by zero, a result that is not a finite number, a power too large.
   tests/model/test_expr.py runs them in Chromium against Python. */
const X = (() => {
  const fail = (message) => { throw new Error(message); };
  const num = (v) => {
    if (typeof v !== "number" || !Number.isFinite(v)) fail("the result is not a finite number");
    return v;
  };
  const nonzero = (b) => (b === 0 ? fail("division by zero") : b);
  return {
    num,
    add: (a, b) => num(a + b), sub: (a, b) => num(a - b), mul: (a, b) => num(a * b),
    div: (a, b) => num(a / nonzero(b)),
    floordiv: (a, b) => num(Math.floor(a / nonzero(b))),
    mod: (a, b) => { nonzero(b); const r = a % b; return num(r !== 0 && (r < 0) !== (b < 0) ? r + b : r); },
    pow: (a, b) => {
      if (a === 0 && b < 0) fail("zero to a negative power");
      if (a < 0 && !Number.isInteger(b)) fail("a negative number to a fractional power");
      if (Math.abs(a) > 1 && b * Math.log2(Math.abs(a)) > 1024) fail("a power too large to compute");
      const whole = Number.isInteger(a) && Number.isInteger(b) && b >= 0;
      if (!whole || b * Math.log2(Math.max(Math.abs(a), 1)) >= 53) return num(a ** b);
      let result = 1;  // a whole power below 2**53: multiplied out, exact, as Python's
      for (let i = 0; i < b && Math.abs(a) > 1; i++) result *= a;
      return num(Math.abs(a) > 1 ? result : a === 0 ? (b === 0 ? 1 : 0) : a === 1 ? 1 : b % 2 ? -1 : 1);
    },
    min: (...v) => num(Math.min(...v)), max: (...v) => num(Math.max(...v)),
    ceil: (a) => num(Math.ceil(a)), floor: (a) => num(Math.floor(a)), abs: (a) => num(Math.abs(a)),
    sqrt: (a) => (a < 0 ? fail("the square root of a negative number") : num(Math.sqrt(a))),
    log2: (a) => (a <= 0 ? fail("the logarithm of a number that is not positive") : num(Math.log2(a))),
  };
})();

/* The "Try it" blocks (templates/_calc.html): infralens.js loads this file and the lab's
   calculators.js (window.InfraLensCalculators: each calculator's fields, presets and compiled
   outputs) on first use, then calls InfraLensCalc.open. Numbers are shown exactly as
   infralens/lab/shown.py shows them in the table beside the form (tests/reader/test_browser_calculators.py). */
const InfraLensCalc = (() => {
  const UNSHOWN = 1e21, TINY = 1e-6, GIVEN = 6;
  const SI = ["", "k", "M", "G", "T", "P", "E"], SI_BELOW_ONE = ["m", "\u00b5", "n"], IEC = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
  const fixed = (v, decimals) => (v === 0 ? 0 : v).toFixed(decimals);  // exact, half away from zero
  const grouped = (digits) => {
    const sign = digits.startsWith("-") ? "-" : "";
    const [whole, fraction] = digits.replace(/^-/, "").split(".");
    return sign + whole.replace(/\B(?=(\d{3})+(?!\d))/g, ",") + (fraction ? "." + fraction : "");
  };
  const significant = (v, digits = 3) => {
    if (v === 0) return "0";
    const size = Math.abs(v), sign = v < 0 ? "-" : "";
    if (size >= UNSHOWN) return sign + "> 1e21";
    if (size < TINY) return sign + "< 1e-6";
    if (size >= 1000) return grouped(fixed(v, 0));
    let decimals = 0, scaled = size;
    while (scaled < 10 ** (digits - 1)) { decimals += 1; scaled *= 10; }
    let text = fixed(v, decimals);
    if (text.includes(".")) text = text.replace(/0+$/, "").replace(/\.$/, "");
    return text === "-0" || text === "0" ? "0" : grouped(text);
  };
  const scaled = (v, base, prefixes, digits) => {
    let index = 0;
    while (index < prefixes.length - 1 && Math.abs(v) >= base ** (index + 1)) index += 1;
    return [significant(v / base ** index, digits), prefixes[index]];
  };
  /* An `si` value below 1 down to nano, multiplied by 1000 ** n as shown.scaled_si does. */
  const scaledSi = (v, digits) => {
    const size = Math.abs(v);
    if (size > 0 && size < 1) {
      for (let power = 1; power <= SI_BELOW_ONE.length; power += 1) {
        if (size * 1000 ** power >= 1 || power === SI_BELOW_ONE.length) return [significant(v * 1000 ** power, digits), SI_BELOW_ONE[power - 1]];
      }
    }
    return scaled(v, 1000, SI, digits);
  };
  /* A number as the manifest or a run gave it: whole in full, else 6 digits, never 3 (shown.exact). */
  const exact = (v) => {
    if (v === 0) return "0";
    if (Math.abs(v) >= UNSHOWN || Math.abs(v) < TINY) return significant(v);
    if (Number.isInteger(v) || Math.abs(v) >= 10 ** GIVEN) return grouped(fixed(v, 0));
    const rounded = Number(v.toPrecision(GIVEN));
    return grouped(Number.isInteger(rounded) ? fixed(rounded, 0) : String(rounded));
  };
  /* A number and its unit, "1 layer" and not "1 layers" (shown.counted, shown.singular). */
  const singular = (unit) => {
    const cut = unit.lastIndexOf(" "), head = unit.slice(0, cut + 1);
    let word = unit.slice(cut + 1);
    if (!/^[a-z]{2,}s$/.test(word) || word.endsWith("ss")) return unit;
    if (word.endsWith("ies")) word = word.slice(0, -3) + "y";
    else if (/(ch|sh|x|ss)es$/.test(word)) word = word.slice(0, -2);
    else word = word.slice(0, -1);
    return head + word;
  };
  const counted = (number, unit) => (unit ? `${number} ${number.replace(/^-/, "") === "1" ? singular(unit) : unit}` : number);
  const show = (v, format, unit, labels, digits = 3) => {
    const after = unit ? " " + unit : "";
    if (format === "label" && labels && Number.isInteger(v) && v >= 0 && v < labels.length) return labels[v];
    if (format === "int") return counted(Math.abs(v) < UNSHOWN ? grouped(fixed(v, 0)) : significant(v), unit);
    if (format === "bytes" || format === "bytes-iec") {
      const [number, prefix] = format === "bytes" ? scaled(v, 1000, SI, digits) : scaled(v, 1024, IEC, digits);
      if (prefix && Number.isInteger(v) && Math.abs(v) < UNSHOWN) return `${number} ${prefix}B (${exact(v)} B)${after}`;
      return `${number} ${prefix}B${after}`;
    }
    if (format === "si") { const [number, prefix] = scaledSi(v, digits); return `${number} ${prefix}${unit}`.trimEnd(); }
    if (format === "ratio") return significant(v, digits) + "×" + after;
    if (format === "percent") return significant(v * 100, digits) + "%" + after;
    return counted(significant(v, digits), unit);
  };
  /* Names come from the manifest, so every lookup by name asks for an own property, and every
     record keyed by names has no prototype: an input `__proto__` or a group `constructor` is then
     a name like any other. */
  const own = (object, name) => (object && Object.prototype.hasOwnProperty.call(object, name) ? object[name] : undefined);
  const record = () => Object.create(null);
  const shown = (output, v) => show(v, output.format, output.unit, output.labels, output.digits);
  const brief = (output, v) => (output.format === "bytes" || output.format === "bytes-iec" ? `${exact(v)} B${output.unit ? " " + output.unit : ""}` : shown(output, v));

  /* A field's text as a number, or why it is not one: "4,096", "4096", "1e6" and " 32 " all read. */
  const NUMBER = /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i;
  const read = (field, text) => {
    if (field.choices) return own(field.choices, text) === undefined ? { error: `${field.label}: pick one of the choices.` } : { value: text };
    const clean = text.trim().replace(/[,_\s]/g, "");
    if (clean === "") return { error: `${field.label}: enter a number.` };
    if (!NUMBER.test(clean)) return { error: `${field.label}: “${text.trim().slice(0, 24)}” is not a number.` };
    const v = Number(clean) * field.scale, bound = (limit) => counted(exact(limit / field.scale), field.unit);
    if (!Number.isFinite(v)) return { error: `${field.label}: too large to compute with.` };
    if (field.whole && !Number.isInteger(v)) return { error: `${field.label}: enter a whole number.` };
    if (field.min !== null && v < field.min) return { error: `${field.label}: at least ${bound(field.min)}.` };
    if (field.max !== null && v > field.max) return { error: `${field.label}: at most ${bound(field.max)}.` };
    return { value: v };
  };

  /* Every output in order for these values, or the first error (a message, never NaN or Infinity). */
  const compute = (calc, values) => {
    const v = record(), out = record();
    calc.inputs.forEach((field) => { v[field.name] = field.choices ? own(field.choices, values[field.name]) : values[field.name]; });
    const broken = (calc.holds || []).findIndex((holds) => { try { return !holds(v); } catch (error) { return true; } });
    if (broken >= 0) return { error: calc.requires[broken], v };
    for (const output of calc.outputs) {
      try { v[output.name] = out[output.name] = own(calc.compute, output.name)(v); } catch (error) { return { error: `${output.label}: ${error.message}.`, v }; }
    }
    return { out, v };
  };
  /* A result's arithmetic with the values in place, inputs exactly as given; a choice
     (`a if test else b`) says in words which side held: "1,000 FLOP/B ≥ 153 FLOP/B: compute-bound". */
  const said = (calc, pieces, v) => pieces.map((piece) => {
    if (typeof piece === "string") return piece;
    const field = calc.inputs.find((f) => f.name === piece.slot);
    if (field) return counted(exact(v[piece.slot] / field.scale), field.unit);
    return brief(calc.outputs.find((o) => o.name === piece.slot), v[piece.slot]);
  }).join("");
  const work = (calc, output, v) => {
    const result = shown(output, v[output.name]);
    if (!output.branches.length) return said(calc, output.pieces, v) + " = " + result;
    const { when, then } = output.branches[own(calc.tests, output.name)(v) ? 0 : 1];
    return said(calc, when, v) + ": " + (then ? said(calc, then, v) + " = " : "") + result;
  };
  const inField = (field, value) => (field.choices ? value : exact(value / field.scale));  // never rounded

  /* The form of an opened block: presets by group, one field per input (a log-scale slider under
     the chart's x), each output with its arithmetic in a live region, the status, the share link.
     window.InfraLens (infralens.js) is read here, not when the file loads: tests/model/test_expr.py runs
     this file's arithmetic on a page of its own. */
  function build(section, calc) {
    const { el } = InfraLens, id = section.dataset.calc, form = el("form", { className: "calc-form", noValidate: true });
    form.setAttribute("aria-describedby", `calc-${id}-status`);
    const rows = new Map();  // the defaults lead the first group's row
    calc.presets.forEach((preset, index) => {
      const group = preset.group || Object.keys(calc.groups)[0] || "Presets";
      if (!rows.has(group)) rows.set(group, []);
      rows.get(group).push([index, preset.label]);
    });
    if (calc.presets.length > 1) {
      rows.forEach((members, group) => {
        const row = el("div", { className: "calc-presets", role: "group" }, el("span", { className: "calc-group", textContent: group }));
        row.setAttribute("aria-label", group);
        row.querySelector("span").setAttribute("aria-hidden", "true");
        members.forEach(([index, label]) => {
          const button = el("button", { type: "button", textContent: label });
          button.dataset.preset = index;
          row.append(button);
        });
        form.append(row);
      });
    }
    const fields = el("div", { className: "calc-fields" }), defaults = calc.presets[0].values;
    calc.inputs.forEach((field) => {
      const fieldId = `calc-${id}-${field.name}`, box = el("div", { className: "calc-field" }, el("label", { htmlFor: fieldId, textContent: field.label }));
      if (field.choices) {
        box.append(el("select", { id: fieldId, name: field.name }, ...Object.entries(field.choices).map(([name, number]) =>
          el("option", { value: name, textContent: `${name} (${counted(exact(number), field.unit)})`, selected: name === own(defaults, field.name) }))));
      } else {
        const input = el("input", { id: fieldId, name: field.name, type: "text", value: inField(field, own(defaults, field.name)), autocomplete: "off" });
        input.inputMode = field.whole ? "numeric" : "decimal";
        input.setAttribute("aria-describedby", `${fieldId}-note`);
        box.append(input, el("span", { className: "calc-unit", id: `${fieldId}-note`, textContent: field.unit }));
        if (calc.chart && calc.chart.x === field.name) {
          const slider = el("input", { className: "calc-slider", type: "range", step: "1",
            min: String(Math.round(Math.log10(field.min) * 100)), max: String(Math.round(Math.log10(field.max) * 100)) });
          slider.dataset.slider = field.name;
          slider.setAttribute("aria-label", `${field.label}, on a log scale`);
          box.append(slider);
        }
      }
      fields.append(box);
    });
    const results = el("dl", { className: "calc-results" }, ...calc.outputs.map((output) =>
      el("div", {}, el("dt", { textContent: output.label }), el("dd", {}, el("output", { name: output.name }), el("span", { className: "calc-work" })))));
    results.setAttribute("aria-live", "polite");
    results.querySelectorAll(".calc-work").forEach((span, index) => { span.dataset.work = calc.outputs[index].name; });
    form.append(fields, results, el("p", { className: "calc-status", id: `calc-${id}-status`, role: "status" }),
      el("p", { className: "calc-share" }, el("a", { href: `#calc-${id}`, textContent: "Link to these inputs" })));
    section.querySelector(".calc-open").after(form);
  }

  /* The chart's file, inlined in place of its image so the ring and the current roof can move. */
  function inline(section) {
    const image = section.querySelector(".calc-chart img");
    if (!image) return Promise.resolve();
    return fetch(image.src).then((response) => response.text()).then((text) => {
      const svg = new DOMParser().parseFromString(text, "image/svg+xml").documentElement;
      if (svg.nodeName === "svg") image.replaceWith(document.importNode(svg, true));
    }).catch(() => {});  // the image stays, without the ring following
  }

  function start(section, calc) {
    const form = section.querySelector(".calc-form"), status = section.querySelector(".calc-status");
    const share = section.querySelector(".calc-share a"), id = section.dataset.calc;
    const control = (name) => form.querySelector(`[id="calc-${id}-${name}"]`);  // not form.elements: a field may be named as one of its properties
    // A field shows a whole value exactly, any other to 6 significant digits, and gives it back
    // through its scale: a preset is on when the fields hold its values to that precision.
    const same = (a, b) => a === b || (typeof a === "number" && typeof b === "number" && Math.abs(a - b) <= 1e-5 * Math.abs(a));
    // The defaults set every input; a preset, the inputs its group sets (hardware keeps the operator).
    const fields = (preset) => (preset.group ? own(calc.groups, preset.group) || [] : calc.inputs.map((f) => f.name));
    const defaults = calc.presets[0].values;
    const current = () => {
      const values = record(), errors = [];
      calc.inputs.forEach((field) => {
        const got = read(field, control(field.name).value);
        control(field.name).setAttribute("aria-invalid", got.error ? "true" : "false");
        if (got.error) errors.push(got.error); else values[field.name] = got.value;
      });
      return { values, errors };
    };
    const update = () => {
      const { values, errors } = current();
      const result = errors.length ? { error: errors[0] } : compute(calc, values);
      calc.outputs.forEach((output) => {
        const place = form.querySelector(`output[name="${output.name}"]`), line = form.querySelector(`[data-work="${output.name}"]`);
        const ok = result.out !== undefined;
        place.textContent = ok ? shown(output, result.out[output.name]) : "—";
        line.textContent = ok ? work(calc, output, result.v) : "";
      });
      status.textContent = result.error || "";
      if (calc.chart) draw(result);
      section.querySelectorAll("[data-preset]").forEach((button) => {
        const preset = calc.presets[button.dataset.preset];
        button.setAttribute("aria-pressed", String(fields(preset).every((name) => same(own(preset.values, name), values[name]))));
      });
      const changed = calc.inputs.filter((f) => values[f.name] !== undefined && !same(values[f.name], own(defaults, f.name)));
      const query = changed.map((f) => `${f.name}=${encodeURIComponent(control(f.name).value.trim())}`).join("&");  // as typed
      share.href = `#calc-${id}` + (query ? "?" + query : "");
      follow();
    };
    /* The roofline: the marker at (x, attainable) and the dashed roof of the current hardware,
       placed as infralens/lab/roofline.py places them (log10 over the decades shown, clamped). */
    const svg = section.querySelector(".calc-chart svg"), slider = section.querySelector("[data-slider]");
    const draw = (result) => {
      if (!svg) return;
      const c = calc.chart, [left, top, right, bottom] = c.box, [lx0, lx1, ly0, ly1] = c.span;
      const px = (x) => Math.min(right, Math.max(left, left + (Math.log10(x) - lx0) / (lx1 - lx0) * (right - left)));
      const py = (y) => Math.min(bottom, Math.max(top, bottom - (Math.log10(y) - ly0) / (ly1 - ly0) * (bottom - top)));
      const marker = svg.querySelector(".marker"), roof = svg.querySelector(".roof-current");
      const ok = result.out !== undefined && result.v[c.x] > 0 && result.out[c.y] > 0;
      marker.style.display = roof.style.display = ok ? "" : "none";
      if (!ok) return;
      const peak = result.v[c.peak], bandwidth = result.v[c.bandwidth], x0 = 10 ** lx0, x1 = 10 ** lx1, ridge = peak / bandwidth;
      const start = Math.max(x0, 10 ** ly0 / bandwidth), points = [[start, Math.min(peak, start * bandwidth)]];
      if (start < ridge && ridge < x1) points.push([ridge, peak]);
      points.push([x1, Math.min(peak, x1 * bandwidth)]);
      roof.setAttribute("d", "M" + points.map(([x, y]) => `${px(x).toFixed(1)} ${py(y).toFixed(1)}`).join(" L"));
      marker.setAttribute("cx", px(result.v[c.x]).toFixed(1));
      marker.setAttribute("cy", py(result.out[c.y]).toFixed(1));
    };
    const follow = () => {  // the slider shows where the typed intensity is
      if (!slider) return;
      const got = read(calc.inputs.find((f) => f.name === slider.dataset.slider), control(slider.dataset.slider).value);
      if (got.value > 0) slider.value = String(Math.round(Math.log10(got.value) * 100));
      slider.setAttribute("aria-valuetext", got.value > 0 ? `${significant(got.value)} ${calc.inputs.find((f) => f.name === slider.dataset.slider).unit}` : "not a number");
    };
    if (slider) {
      slider.addEventListener("input", (event) => {
        event.stopPropagation();  // the form's own input listener would read the slider as a field
        control(slider.dataset.slider).value = significant(10 ** (Number(slider.value) / 100));
        update();
      });
    }
    const fill = (values, then = true) => {  // values as the calculator holds them (unscaled)
      Object.entries(values).forEach(([name, value]) => {
        const field = calc.inputs.find((f) => f.name === name);
        if (field) control(name).value = inField(field, value);
      });
      if (then) update();
    };
    /* A link's parameters, each decoded on its own: one a mail client or chat mangled
       (`%E0%A4`, which decodeURIComponent refuses) is left out, and the rest still apply. */
    const decoded = (text) => { try { return decodeURIComponent(text.replace(/\+/g, " ")); } catch (error) { return null; } };
    const fromAddress = () => {
      const hash = decoded(location.hash) ?? location.hash;
      if (!hash.startsWith(`#calc-${id}?`)) return false;
      const query = location.hash.slice(location.hash.indexOf("?") + 1), given = new Map();
      query.split("&").forEach((pair) => {
        const cut = pair.indexOf("="), name = decoded(pair.slice(0, cut)), text = decoded(pair.slice(cut + 1));
        if (cut > 0 && name !== null && text !== null) given.set(name, text);
      });
      fill(defaults, false);
      given.forEach((text, name) => { if (calc.inputs.some((f) => f.name === name)) control(name).value = text; });
      update();
      section.scrollIntoView();
      return true;
    };
    form.addEventListener("input", update);
    form.addEventListener("submit", (event) => event.preventDefault());
    section.querySelectorAll("[data-preset]").forEach((button) => {
      const preset = calc.presets[button.dataset.preset];
      button.addEventListener("click", () => fill(Object.fromEntries(fields(preset).map((name) => [name, preset.values[name]]))));
    });
    addEventListener("hashchange", fromAddress);
    if (!fromAddress()) update();
  }

  /* Open a block once: build its form, inline its chart, start; then focus its first field. */
  const open = (section, focus) => {
    const calc = own(window.InfraLensCalculators, section.dataset.calc);
    if (!calc) return Promise.resolve();
    if (!section.dataset.started) {
      section.dataset.started = "1";
      build(section, calc);
      section.classList.add("open");
      section.opened = inline(section).then(() => { start(section, calc); section.dataset.ready = "1"; });
    }
    return section.opened.then(() => { if (focus) section.querySelector(".calc-form input, .calc-form select").focus(); });
  };

  return { show, significant, exact, counted, read, compute, open };
})();
window.InfraLensCalc = InfraLensCalc;
