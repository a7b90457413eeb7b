/* The live run page.
 *
 * The page was rendered at event #data-last-seq. The socket says that number on
 * every (re)connect and gets exactly the events after it; an event at or below
 * the last one applied is a duplicate and is dropped, one further ahead than the
 * next is a gap and the page asks again from its last one. Log lines, status,
 * progress (with rate and ETA), step and branch are drawn here from the events,
 * always with textContent; the heavier panels (effects, timeline, output, the
 * input form, actions) are re-rendered by the server and swapped in by htmx when
 * an event makes them stale.
 */
(function () {
  "use strict";

  const page = document.getElementById("run-page");
  if (!page) return;

  const FINAL = ["succeeded", "failed", "cancelled"];
  const LABELS = {queued: "queued", running: "running", paused: "paused", waiting: "waiting",
                  needs_attention: "needs attention", succeeded: "succeeded", failed: "failed",
                  cancelled: "cancelled"};
  const MAX_LINES = 10000;
  const PANEL_GAP_MS = 600;

  const log = document.getElementById("event-log");
  const scroller = document.getElementById("log-scroll");
  const jump = document.getElementById("log-jump");
  const $ = (id) => document.getElementById(id);

  let lastSeq = parseInt(page.dataset.lastSeq, 10) || 0;
  let status = page.dataset.status;
  let stall = page.dataset.stalled ? {kind: page.dataset.stalled} : null;   // runs/worker/stalls.py
  let live = null;
  let unseen = 0;

  // --- the log -----------------------------------------------------------------------------
  function pad(n) { return String(n).padStart(2, "0"); }
  function clock(iso) {
    const d = new Date(iso);
    if (isNaN(d)) return "";
    return pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }

  function line(ev) {
    const li = document.createElement("li");
    li.className = "ev ev-" + String(ev.kind).replace(/[^a-z_]/gi, "");
    li.dataset.seq = ev.seq;
    const seq = document.createElement("span"); seq.className = "ev-seq"; seq.textContent = ev.seq;
    const time = document.createElement("time"); time.dateTime = ev.at; time.textContent = clock(ev.at);
    const kind = document.createElement("span"); kind.className = "ev-kind"; kind.textContent = ev.kind;
    const text = document.createElement("span"); text.className = "ev-text"; text.textContent = ev.text;
    li.append(seq, time, kind, text);
    return li;
  }

  const atBottom = () => scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 40;

  function appendLines(lines) {
    const follow = atBottom();
    const fragment = document.createDocumentFragment();
    lines.forEach((li) => fragment.appendChild(li));
    log.appendChild(fragment);
    while (log.children.length > MAX_LINES) log.removeChild(log.firstElementChild);
    if (follow) {
      scroller.scrollTop = scroller.scrollHeight;
    } else {
      unseen += lines.length;
      jump.hidden = false;
      jump.querySelector("span").textContent = unseen + " new event" + (unseen === 1 ? "" : "s");
    }
  }

  scroller.addEventListener("scroll", () => { if (atBottom()) { unseen = 0; jump.hidden = true; } });
  jump.addEventListener("click", () => {
    scroller.scrollTop = scroller.scrollHeight; unseen = 0; jump.hidden = true;
  });
  const showAll = $("show-all-events");
  showAll.addEventListener("change", () => log.classList.toggle("logs-only", !showAll.checked));

  // --- status, progress, rate and ETA ---------------------------------------------------------
  function drawState() {   // badge and bar: a stalled run shows no stripe and no pulse
    const safe = stall ? "stalled" : status.replace(/[^a-z_]/g, "");
    const badge = document.createElement("span");
    badge.className = "badge status-" + safe;
    badge.dataset.role = "status";
    badge.textContent = stall ? "stalled" : LABELS[status] || status;
    $("run-status").replaceChildren(badge);
    const bar = document.querySelector("#run-progress .progress");
    bar.classList.toggle("is-running", status === "running" && !stall);
    bar.querySelector(".progress-fill").className = "progress-fill status-" + safe;
  }

  function setStall(next) {
    stall = next;
    if (stall) page.dataset.stalled = stall.kind; else delete page.dataset.stalled;
    const note = $("run-stall");
    note.hidden = !stall;
    if (stall) {
      $("run-stall-since").dateTime = stall.since;
      $("run-stall-since").textContent = clock(stall.since);
      $("run-stall-why").textContent = stall.why;
      $("run-eta").textContent = "—";
    }
    drawState();
    if (!stall) drawRate();
    if (live) live.setNote(stall ? "stalled" : "");
  }

  function moving() {   // no ETA for a run that does not move
    return !stall && (status === "running" || status === "queued");
  }

  function setStatus(next) {
    status = next;
    page.dataset.status = next;
    drawState();
    if (moving()) drawRate(); else $("run-eta").textContent = next === "succeeded" ? "done" : "—";
    if (next === "succeeded" && samples.length) {
      const last = samples[samples.length - 1];
      if (last.total) drawProgress(last.total, last.total, null);
    }
  }

  const samples = JSON.parse(($("progress-samples") || {}).textContent || "[]");

  function fmtNumber(n) {
    return Number.isInteger(n) ? String(n) : String(Math.round(n * 100) / 100);
  }

  function fmtDuration(seconds) {
    seconds = Math.max(0, Math.round(seconds));
    if (seconds < 60) return seconds + " s";
    if (seconds < 3600) return Math.floor(seconds / 60) + " min " + pad(seconds % 60) + " s";
    return Math.floor(seconds / 3600) + " h " + pad(Math.floor(seconds % 3600 / 60)) + " min";
  }

  function drawProgress(done, total, message) {
    const pct = total ? Math.max(0, Math.min(100, 100 * done / total)) : 0;
    const bar = document.querySelector("#run-progress .progress");
    bar.setAttribute("aria-valuenow", Math.round(pct));
    bar.querySelector(".progress-fill").style.width = pct.toFixed(1) + "%";
    $("run-progress-counts").textContent = total ? fmtNumber(done) + " / " + fmtNumber(total) : "—";
    $("run-progress-percent").textContent = total ? Math.round(pct) + "%" : "";
    if (message !== null) $("run-progress-message").textContent = message || "";
  }

  // The rate is how fast `done` grows over the last minute. The ETA is how long the work
  // left (total - done) takes to run out at the pace it shrank over that minute: an agent
  // that finds its work as it goes (a crawl finding links) grows its total, and dividing
  // the work left by the rate of `done` alone would promise an end that keeps receding.
  function drawRate() {
    if (samples.length < 2) return;
    const last = samples[samples.length - 1];
    let first = samples[0];
    for (const s of samples) { if (last.at - s.at <= 60) { first = s; break; } }
    if (first === last) first = samples[samples.length - 2];
    const dt = last.at - first.at, dd = last.done - first.done;
    if (dt <= 0) return;
    if (dd > 0) {
      const rate = dd / dt;
      $("run-rate").textContent = rate >= 1 ? fmtNumber(Math.round(rate * 10) / 10) + "/s"
        : fmtNumber(Math.round(rate * 600) / 10) + "/min";
    }
    if (moving()) $("run-eta").textContent = eta(first, last, dt);
  }

  function eta(first, last, dt) {
    const left = last.total - last.done;
    if (left <= 0) return "finishing";
    const shrinking = (first.total - first.done - left) / dt;
    if (shrinking <= 0) return last.total > first.total ? "unknown: the total keeps growing" : "—";
    return "≈ " + fmtDuration(left / shrinking) + (last.total > first.total ? " (total growing)" : "");
  }

  // A new branch (a rollback, an edit, an upgrade) counts its own progress: the rate and
  // ETA of the work it went back on say nothing of it, so they are cleared until it moves.
  function newCount() {
    samples.length = 0;
    $("run-rate").textContent = "—";
    $("run-eta").textContent = "—";
  }

  function addSample(ev) {
    const sample = {at: Date.parse(ev.at) / 1000, done: Number(ev.data.done) || 0,
                    total: Number(ev.data.total) || 0};
    const prev = samples[samples.length - 1];
    if (prev && sample.done < prev.done) newCount();
    samples.push(sample);
    if (samples.length > 120) samples.shift();
    drawProgress(sample.done, sample.total, ev.data.message);
    drawRate();
  }

  // The step the run is in: its last checkpoint's, or a later one its effects are logged
  // at (the server's rule: run_current_step in runs/selectors.py).
  function advanceStep(step, branch) {
    const el = $("run-step");
    if (typeof step !== "number" || String(branch) !== $("run-branch").textContent) return;
    if (!(step <= parseInt(el.textContent, 10))) el.textContent = step;
  }

  function tickDuration() {
    const el = $("run-duration");
    const started = parseFloat(el.dataset.started);
    const finished = parseFloat(el.dataset.finished);
    const end = isNaN(finished) ? Date.now() / 1000 : finished;
    if (!isNaN(started)) el.textContent = fmtDuration(end - started);
  }

  // --- panels the server renders -----------------------------------------------------------------
  const dirty = new Set();
  let panelTimer = null;
  let panelBusy = false;
  let panelLast = 0;

  const CHAT = !!document.getElementById("conversation");   // a chat run: runs/chat/

  function stale(...names) {
    names.forEach((n) => { if (n !== "conversation" || CHAT) dirty.add(n); });
    schedulePanels();
  }

  function schedulePanels() {
    if (panelTimer || panelBusy || !dirty.size) return;
    const wait = Math.max(0, PANEL_GAP_MS - (Date.now() - panelLast));
    panelTimer = setTimeout(refreshPanels, wait);
  }

  let panelsAsked = [], refused = false;

  function refreshPanels() {
    panelTimer = null;
    if (!window.htmx || !dirty.size) return;
    const names = Array.from(dirty);
    dirty.clear();
    panelsAsked = names;
    panelBusy = true; refused = false;
    panelLast = Date.now();
    const covering = lastSeq;   // the server draws the run as of this event, or later
    const query = names.map((n) => "p=" + encodeURIComponent(n)).join("&");
    // Its own source element: htmx queues a request behind one in flight from the same
    // element, keeps only the last one queued, and resolves the promise of a queued one at
    // once. Sharing document.body with the checkpoint viewer dropped panels made stale
    // while a checkpoint loaded, and the header kept a state the run had left.
    window.htmx.ajax("GET", page.dataset.panelsUrl + "?" + query,
                     {source: page, target: "#run-page", swap: "none"})
      .catch(() => { refused = true; names.forEach((n) => dirty.add(n)); })
      .finally(() => { panelBusy = false; schedulePanels(); settle(refused ? null : covering); });
  }

  // The page's signal (live.js): the events up to `seq` applied with every panel they made
  // stale, or all of them when no panel is left to fetch.
  function settle(seq) {
    window.LiveSocket.applied(page, !dirty.size && !panelTimer && !panelBusy ? lastSeq : seq);
  }

  // A refresh the server did not answer (a 503 while the database is away) is asked for
  // again: htmx resolves the request's promise all the same.
  page.addEventListener("htmx:afterRequest", (event) => {
    if (event.detail.elt !== page || event.detail.successful) return;
    refused = true;
    panelsAsked.forEach((n) => dirty.add(n));
  });

  // A live refresh of the question the form already asks leaves the form as the user has
  // it: an answer being typed, or the field errors of one just refused, are not redrawn
  // away by the events that follow the question (its status, another viewer's answer
  // attempt). A new question, or no question any more, is drawn as usual.
  document.body.addEventListener("htmx:oobBeforeSwap", (event) => {
    const current = event.detail.target;
    if (!current || current.id !== "panel-input" || !current.dataset.question) return;
    // an outerHTML swap: the fragment holds the panel as drawn
    const incoming = event.detail.fragment.firstElementChild;
    if (incoming && incoming.hasAttribute("data-live") &&
        incoming.dataset.question === current.dataset.question) {
      event.detail.shouldSwap = false;
    }
  });

  // --- applying events ---------------------------------------------------------------------------
  function apply(ev) {
    const data = ev.data || {};
    if (window.Conversation) window.Conversation.apply(ev);
    switch (ev.kind) {
      case "status":
        if (data.status) setStatus(data.status);
        if (FINAL.includes(data.status)) {
          $("run-duration").dataset.finished = Date.parse(ev.at) / 1000;
          stale("stats", "actions", "input", "effects", "timeline", "output", "budget", "conversation",
                "children");
        } else {
          // a parent woken by a child that ended: the children panel moved too
          stale("stats", "actions", "input", "output", "timeline", "budget", "conversation", "children");
        }
        break;
      case "progress": addSample(ev); break;
      case "log": break;
      case "checkpoint":
        if (data.branch !== undefined && String(data.branch) !== $("run-branch").textContent) {
          $("run-branch").textContent = data.branch;
          $("run-step").textContent = data.step;
        } else {
          advanceStep(data.step, data.branch);
        }
        stale("timeline", "conversation");
        break;
      case "stream": break;   // drawn by conversation.js
      case "effect":
        advanceStep(data.step, data.branch);
        stale("effects");
        if (data.cost !== undefined) stale("budget");  // a metered call: the ledger moved
        break;
      case "budget": stale("budget"); break;
      case "child": stale("children", "effects"); break;  // a child run launched
      case "rollback": case "edit": case "upgrade":
        $("run-branch").textContent = data.branch;
        $("run-step").textContent = data.step;
        newCount();
        stale("stats", "timeline", "effects", "output", "actions", "conversation");
        break;
      case "version":   // moved to another code of its agent (docs/deploys.md)
        if (data.to_version !== undefined) $("run-version").textContent = "v" + data.to_version;
        stale("stats", "actions", "effects", "timeline");
        break;
      case "output": stale("output"); break;
      case "input_requested": case "input_received": stale("input", "actions", "conversation"); break;
      default: stale("actions");
    }
  }

  function onEvents(events, live) {
    const lines = [];
    for (const ev of events) {
      if (ev.seq <= lastSeq) continue;                 // a duplicate: already shown
      if (ev.seq !== lastSeq + 1) {                   // a gap: ask again from what we have
        live.send({type: "resume", after: lastSeq, stalled: stall ? stall.kind : null});
        break;
      }
      lines.push(line(ev));
      apply(ev);
      lastSeq = ev.seq;
    }
    if (!lines.length) return;
    appendLines(lines);
    page.dataset.lastSeq = $("run-seq").textContent = lastSeq;
    settle();
  }

  // --- checkpoints on the timeline ----------------------------------------------------------------
  let shownCheckpoint = null;
  let pinned = null;
  let hoverTimer = null;

  function showCheckpoint(mark, pin) {
    const number = mark.dataset.checkpoint;
    if (pin) pinned = number;
    document.querySelectorAll(".mark.is-selected").forEach((m) => m.classList.remove("is-selected"));
    mark.classList.add("is-selected");
    if (shownCheckpoint === number) return;
    shownCheckpoint = number;
    window.htmx.ajax("GET", mark.dataset.url,
                     {source: "#checkpoint-state", target: "#checkpoint-state", swap: "innerHTML"});
  }

  document.addEventListener("click", (event) => {
    const mark = event.target.closest && event.target.closest("[data-checkpoint]");
    if (mark) showCheckpoint(mark, true);
  });
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Enter" && event.key !== " ") return;
    const mark = event.target.closest && event.target.closest("[data-checkpoint]");
    if (mark) { event.preventDefault(); showCheckpoint(mark, true); }
  });
  document.addEventListener("mouseover", (event) => {
    const mark = event.target.closest && event.target.closest("[data-checkpoint]");
    clearTimeout(hoverTimer);
    if (mark && !pinned) hoverTimer = setTimeout(() => showCheckpoint(mark, false), 150);
  });
  document.body.addEventListener("htmx:oobAfterSwap", () => {
    const current = pinned || shownCheckpoint;
    if (!current) return;
    const mark = document.querySelector('[data-checkpoint="' + current + '"]');
    if (mark) mark.classList.add("is-selected");
  });

  // --- start ------------------------------------------------------------------------------------
  log.querySelectorAll("time[datetime]").forEach((t) => { t.textContent = clock(t.dateTime); });
  document.body.addEventListener("htmx:afterSwap", (event) => {
    if (event.detail.target === log) {
      log.querySelectorAll("time[datetime]").forEach((t) => { t.textContent = clock(t.dateTime); });
    }
  });
  scroller.scrollTop = scroller.scrollHeight;
  drawRate();
  tickDuration();
  setInterval(() => { if (!FINAL.includes(status)) tickDuration(); }, 1000);

  const since = $("run-stall-since");
  if (stall && since.dateTime) since.textContent = clock(since.dateTime);
  window.LiveSocket.drawnAt(page, lastSeq);   // as the server rendered it
  live = new window.LiveSocket(page.dataset.wsPath, {
    onOpen(socket) { socket.send({type: "hello", after: lastSeq, stalled: stall ? stall.kind : null}); },
    onMessage(message, socket) {
      if (message.type === "events") onEvents(message.events, socket);
      else if (message.type === "stall") { setStall(message.stall); window.LiveSocket.applied(page); }
    },
  });
  if (stall) live.setNote("stalled");
})();
