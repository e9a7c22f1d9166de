/* The index's summary of the reader's progress (kept by infralens.js in this browser's
   localStorage, "infralens-progress"), with a reset. Nothing leaves the browser. */
(() => {
  const doc = document, panel = doc.querySelector(".progress");
  let labs;
  try { labs = Object.values(JSON.parse(localStorage.getItem("infralens-progress")) || {}); } catch (e) { return; }
  const seen = labs.filter((lab) => lab.seen).length;
  const right = labs.reduce((sum, lab) => sum + Object.values(lab.q || {}).filter((v) => v > 1).length, 0);
  if (!panel || !labs.length) return;
  panel.querySelector("span").textContent = `In this browser: ${seen} lab${seen !== 1 ? "s" : ""} visited, ${right} question${right !== 1 ? "s" : ""} answered right.`;
  panel.querySelector("button").onclick = () => {
    try { localStorage.removeItem("infralens-progress"); } catch (e) { /* nothing was kept */ }
    doc.querySelectorAll(".mark, .mark + .sr").forEach((mark) => mark.remove());
    panel.hidden = true;
  };
  panel.hidden = false;
})();
