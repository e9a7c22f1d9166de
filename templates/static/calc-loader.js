/* Loads the calculators of a lab page (static/calculator.js, then the lab's calculators.js) when a
   reader first reaches for one or follows a link to one, so they weigh nothing on the page's load.
   A preset pressed before they have loaded is pressed again once they have. */
(() => {
  const sections = [...document.querySelectorAll("[data-calc]")];
  let asked = false, pending = null;
  const load = () => {
    if (asked || !sections.length) return;
    asked = true;
    const script = (src) => Object.assign(document.createElement("script"), { src, async: false });
    const runtime = script(sections[0].dataset.calcRuntime), data = script(sections[0].dataset.calcScript);
    data.onload = () => {
      if (!window.InfraLensCalc) return;
      window.InfraLensCalc.start(sections);
      if (pending) pending.click();
    };
    document.head.append(runtime, data);
  };
  sections.forEach((section) => {
    ["focusin", "pointerover", "touchstart"].forEach((type) => section.addEventListener(type, load, { passive: true }));
    section.addEventListener("click", (event) => {
      const preset = event.target.closest("[data-preset]");
      if (preset && !section.dataset.started) { pending = preset; load(); }
    });
  });
  const followed = () => { if (location.hash.startsWith("#calc-")) load(); };
  addEventListener("hashchange", followed);
  followed();
})();
