// Counts down every [data-countdown-until] (POSIX seconds) once a second. A run that
// waits to retry sends no events, so nothing re-renders the page while the wait shrinks.
(function () {
  "use strict";
  if (window.agentopsCountdown) return;
  function tick() {
    document.querySelectorAll("[data-countdown-until]").forEach(function (el) {
      var until = parseFloat(el.dataset.countdownUntil);
      if (!isNaN(until)) el.textContent = Math.max(0, Math.round(until - Date.now() / 1000));
    });
  }
  window.agentopsCountdown = setInterval(tick, 1000);
  tick();
})();
