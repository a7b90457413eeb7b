/* A submit button with data-confirm asks before it acts (the operator pages' danger
 * actions: cancel, give up). Keyboard activation clicks the button too, so it asks then.
 * A form whose chosen action has a data-confirm-ACTION attribute (the dashboard's bulk
 * form) asks before it is sent. */
(function () {
  "use strict";
  document.addEventListener("click", (event) => {
    const button = event.target.closest && event.target.closest("button[data-confirm]");
    if (button && !window.confirm(button.dataset.confirm)) event.preventDefault();
  });
  document.addEventListener("submit", (event) => {
    const form = event.target;
    const action = form.querySelector && form.querySelector('select[name="action"]');
    const question = action && form.getAttribute("data-confirm-" + action.value);
    if (question && !window.confirm(question)) event.preventDefault();
  });
})();
