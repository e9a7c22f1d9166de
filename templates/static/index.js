/* The index's summary of the reader's progress (InfraLens.progress, kept by infralens.js in this
   browser), with a reset. Nothing leaves the browser. */
(() => {
  const { $, $$, progress } = InfraLens, panel = $(".progress"), all = progress.read();
  const labs = Object.values(all || {});
  if (!panel || !labs.length) return;
  const seen = labs.filter((lab) => lab.seen).length;
  const right = labs.reduce((sum, lab) => sum + Object.values(lab.q || {}).filter((v) => v > 1).length, 0);
  $("span", panel).textContent = `In this browser: ${seen} lab${seen !== 1 ? "s" : ""} visited, ${right} question${right !== 1 ? "s" : ""} answered right.`;
  $("button", panel).onclick = () => {
    progress.reset();
    $$(".mark, .mark + .sr").forEach((mark) => mark.remove());
    panel.hidden = true;
  };
  panel.hidden = false;
})();
