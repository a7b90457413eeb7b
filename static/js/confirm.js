/* A submit button with data-confirm asks before it acts (the operator pages' danger
 * actions: cancel, give up). Keyboard activation clicks the button too, so it asks then. */
(function () {
  "use strict";
  document.addEventListener("click", (event) => {
    const button = event.target.closest && event.target.closest("button[data-confirm]");
    if (button && !window.confirm(button.dataset.confirm)) event.preventDefault();
  });
})();
