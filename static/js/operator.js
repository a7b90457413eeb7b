// The operator pages. No inline script: the Content-Security-Policy allows none.
(function () {
  "use strict";
  // A checkbox with data-selects="<selector>" ticks or clears every box it selects.
  document.addEventListener("change", (event) => {
    const box = event.target;
    if (!(box instanceof HTMLInputElement) || !box.dataset.selects) return;
    document.querySelectorAll(box.dataset.selects).forEach((c) => { c.checked = box.checked; });
  });
})();
