/* Loads the calculators of a lab page (static/calculator.js, then the lab's calculators.js) when a
   reader first reaches for one or follows a link to one, so they weigh nothing on the page's load. */
(() => {
  const sections = [...document.querySelectorAll("[data-calc]")];
  let asked = false;
  const load = () => {
    if (asked || !sections.length) return;
    asked = true;
    const script = (src) => Object.assign(document.createElement("script"), { src, async: false });
    const runtime = script(sections[0].dataset.calcRuntime), data = script(sections[0].dataset.calcScript);
    data.onload = () => window.InfraLensCalc && window.InfraLensCalc.start(sections);
    document.head.append(runtime, data);
  };
  sections.forEach((section) => ["focusin", "pointerover", "touchstart"].forEach((type) => section.addEventListener(type, load, { passive: true })));
  const followed = () => { if (location.hash.startsWith("#calc-")) load(); };
  addEventListener("hashchange", followed);
  followed();
})();
