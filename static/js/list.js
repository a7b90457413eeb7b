/* The run list, live: it tells the server which runs it shows (and at which event
 * seq); the server answers with the rows that moved, and says when a run was
 * launched elsewhere (page 1 then refreshes itself; other pages show a notice). */
(function () {
  "use strict";

  const container = document.getElementById("run-list");
  if (!container) return;
  const LABELS = {queued: "queued", running: "running", paused: "paused", waiting: "waiting",
                  needs_attention: "needs attention", succeeded: "succeeded", failed: "failed",
                  cancelled: "cancelled"};
  let live = null;

  function clock(iso) {
    const d = new Date(iso);
    return isNaN(d) ? "" : [d.getHours(), d.getMinutes(), d.getSeconds()]
      .map((n) => String(n).padStart(2, "0")).join(":");
  }

  function fmt(n) { return Number.isInteger(n) ? String(n) : String(Math.round(n * 100) / 100); }

  function watch() {
    const runs = {};
    const stalled = {};
    container.querySelectorAll("tr[data-run-id]").forEach((row) => {
      // a row as the server rendered it (a row being refreshed keeps its own until it is)
      if (!row.dataset.liveSeq) window.LiveSocket.drawnAt(row, row.dataset.seq);
      runs[row.dataset.runId] = parseInt(row.dataset.seq, 10) || 0;
      if (row.dataset.stalled) stalled[row.dataset.runId] = row.dataset.stalled;
    });
    if (!live) return;
    const list = container.querySelector(".run-list");
    live.send({type: "watch", runs: runs, stalled: stalled,
               newest: (list && list.dataset.newest) || null});
  }

  function update(summary) {
    const row = document.getElementById("run-row-" + summary.id);
    if (!row || (parseInt(row.dataset.seq, 10) || 0) >= summary.seq) return;
    const safe = String(summary.status).replace(/[^a-z_]/g, "");
    row.dataset.seq = summary.seq;
    const wasFinal = ["succeeded", "failed", "cancelled"].includes(row.dataset.status);
    row.dataset.status = safe;
    const bar = row.querySelector('[data-role="progress"]');
    bar.setAttribute("aria-valuenow", Math.round(summary.percent));
    bar.querySelector(".progress-fill").style.width = summary.percent + "%";
    setStall(summary.id, summary.stall);
    row.querySelector('[data-role="counts"]').textContent =
      summary.total ? fmt(summary.done) + " / " + fmt(summary.total) : "";
    row.querySelector('[data-role="message"]').textContent =
      summary.asks ? "waiting for your answer" : summary.message || "";
    row.querySelector('[data-role="step"]').textContent = summary.step;
    if (summary.final && !wasFinal && window.htmx) {   // the server has the final duration
      // The row as the source: htmx queues a request behind one in flight from the same
      // element and keeps only the last, so rows sharing document.body were dropped when
      // several runs ended at once.
      // The row drawn anew is marked as the server rendered it (watch, on its swap).
      window.htmx.ajax("GET", container.dataset.rowsUrl + "?id=" + encodeURIComponent(summary.id),
                       {source: row, target: "#run-list", swap: "none"})
        .then(() => window.LiveSocket.applied(null));
    } else {
      window.LiveSocket.applied(row, summary.seq);
    }
  }

  function setStall(runId, stall) {   // runs/worker/stalls.py: no stripe, an amber badge, the cause
    const row = document.getElementById("run-row-" + runId);
    if (!row) return;
    if (stall) row.dataset.stalled = stall.kind; else delete row.dataset.stalled;
    drawState(row);
    const caption = row.querySelector('[data-role="stall"]');
    caption.hidden = !stall;
    caption.textContent = stall ? "stalled since " + clock(stall.since) + ": " + stall.why : "";
  }

  function drawState(row) {
    const stalled = Boolean(row.dataset.stalled);
    const status = row.dataset.status;
    const safe = stalled ? "stalled" : status;
    const badge = row.querySelector('[data-role="status"]');
    badge.className = "badge status-" + safe;
    badge.textContent = stalled ? "stalled" : LABELS[status] || status;
    const bar = row.querySelector('[data-role="progress"]');
    bar.classList.toggle("is-running", status === "running" && !stalled);
    bar.querySelector(".progress-fill").className = "progress-fill status-" + safe;
  }

  function newRuns() {
    const list = container.querySelector(".run-list");
    const onFirstPage = !list || list.dataset.page === "1";
    if (onFirstPage && window.htmx) {
      window.htmx.ajax("GET", window.location.pathname + window.location.search,
                       {target: "#run-list", swap: "innerHTML"})
        .then(() => window.LiveSocket.applied(null));
    } else {
      document.getElementById("new-runs").hidden = false;
    }
  }

  document.body.addEventListener("htmx:afterSwap", (event) => {
    if (event.detail.target === container) {
      document.getElementById("new-runs").hidden = true;
      watch();
    }
  });
  document.body.addEventListener("htmx:oobAfterSwap", () => watch());

  watch();   // marks the rows as rendered; it tells the server once the socket is open
  live = new window.LiveSocket(container.dataset.wsPath, {
    onOpen() { watch(); },
    onMessage(message) {
      if (message.type === "runs") message.runs.forEach(update);
      else if (message.type === "new_runs") newRuns();
      else if (message.type === "stalls") {
        Object.entries(message.runs).forEach(([runId, stall]) => setStall(runId, stall));
        window.LiveSocket.applied(null);
      }
    },
  });
})();
