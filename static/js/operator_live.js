/* The operator pages, live: a socket to /ws/operator/ says which of the runs shown
 * changed (runs/operator/consumers.py) and the page asks the server for its partials
 * again. While the socket is not live the same partials are polled instead, every
 * data-ops-poll seconds: polling is only the fallback.
 *
 *   <span id="live-indicator" data-ops-live data-ops-poll="3" data-ops-all="1">
 *                                                            the page is live
 *     <div id="runs-table" data-ops-refresh data-ops-url="..."
 *          data-ops-hold="input.run-select:checked">         a partial it re-renders;
 *                                                            not while `hold` matches
 *       <tr data-live-run="ID" data-live-seq="SEQ">          a run shown, as drawn
 *
 * window.opsLive counts what happened (ticks of the fallback timer, polls made,
 * refreshes the socket caused, answers received, fetches deferred until the one out
 * was answered) for the browser tests; <body data-live-applied> counts the answers drawn
 * (the page's signal, static/js/live.js), and each partial carries the event number its
 * runs were drawn at (data-live-seq). */
(function () {
  "use strict";
  const root = document.querySelector("[data-ops-live]");
  if (!root || !window.htmx || !window.LiveSocket) return;
  const state = {ticks: 0, polls: 0, refreshes: 0, answered: 0, deferred: 0, live: false};
  window.opsLive = state;
  const pollMs = Math.max(0.2, Number(root.dataset.opsPoll) || 3) * 1000;
  const everything = root.dataset.opsAll === "1";
  let pending = null;   // a refresh held back while the operator is selecting rows

  function shown() {
    const runs = {};
    document.querySelectorAll("[data-live-run]").forEach((el) => {
      const seq = parseInt(el.dataset.liveSeq, 10) || 0;
      runs[el.dataset.liveRun] = Math.max(runs[el.dataset.liveRun] || 0, seq);
    });
    return runs;
  }

  // One request per partial at a time: a change told while one is out is fetched once
  // that one is drawn, from the partial as redrawn. Two at once went wrong: the second
  // answer was swapped relative to the element the first one had replaced, outside the
  // page, where none of its out-of-band targets are (htmx:oobErrorNoTarget, and the
  // change it carried was lost). htmx's own one-request-per-element guard does not hold
  // here: it is reset when htmx settles the swapped-in element, 20 ms after the swap, and
  // a notice in between starts a request that the next one does not wait for.
  const inFlight = new Map();   // a partial's id -> "" or how to fetch it again after

  function fetchPartial(el, how) {
    if (inFlight.has(el.id)) {
      state.deferred += 1;
      if (!inFlight.get(el.id) || how === "live") inFlight.set(el.id, how);
      return;
    }
    inFlight.set(el.id, "");
    if (how === "poll") state.polls += 1; else state.refreshes += 1;
    const answered = () => {
      state.answered += 1;
      LiveSocket.applied(null);
      const again = inFlight.get(el.id);
      inFlight.delete(el.id);
      const now = document.getElementById(el.id);
      if (again && now) refreshOne(now, again);
    };
    htmx.ajax("GET", el.dataset.opsUrl, {source: el, target: el, swap: "outerHTML",
                                        headers: {"X-Ops-Refresh": how}}).then(answered, answered);
  }

  function refreshOne(el, how) {
    const hold = el.dataset.opsHold;
    if (hold && document.querySelector(hold)) { pending = how; return; }
    fetchPartial(el, how);
  }

  function refresh(how) {
    pending = null;
    document.querySelectorAll("[data-ops-refresh]").forEach((el) => refreshOne(el, how));
  }

  // Once watching, refresh to catch up what changed while the socket was down, or, on
  // a page that depends on every run, between its render and the server's first look.
  let opened = 0;
  let catchUp = false;
  const socket = new LiveSocket("/ws/operator/", {
    onOpen(live) {
      catchUp = opened++ > 0 || everything;
      live.send({type: "watch", runs: shown(), all: everything});
    },
    onMessage(message) {
      if (message.type === "watching") {
        state.live = true;
        if (catchUp) { catchUp = false; refresh("live"); }
      }
      if (message.type === "changed") refresh("live");
    },
    onClose() { state.live = false; },
  });

  // A live redraw must not take what the operator is typing: the controls re-rendered
  // under a half-typed reason would send the next click with the reason empty (the
  // browser then refuses the required field and nothing happens). What was changed in
  // a form is kept, by form id and field name, into the form as redrawn: at once, in
  // the same task as the swap (on settle, 20 ms later, a click could land in between on
  // the empty field).
  let typed = [];
  document.body.addEventListener("htmx:beforeSwap", () => {
    typed = [];
    document.querySelectorAll("form[id] input[name], form[id] textarea[name]").forEach((el) => {
      if (el.type === "hidden" || el.type === "submit") return;
      const box = el.type === "checkbox" || el.type === "radio";
      if (box ? el.checked === el.defaultChecked : el.value === el.defaultValue) return;
      typed.push({form: el.form.id, name: el.name, value: el.value, box, checked: el.checked,
                  focused: el === document.activeElement});
    });
  });
  document.body.addEventListener("htmx:afterSwap", () => {
    typed.forEach((field) => {
      const form = document.getElementById(field.form);
      if (!form) return;
      form.querySelectorAll("[name]").forEach((el) => {
        if (el.name !== field.name) return;
        if (field.box) {
          if (el.value === field.value) el.checked = field.checked;
        } else if (el.value === el.defaultValue) {
          el.value = field.value;
          if (field.focused && document.activeElement !== el) el.focus();
        }
      });
    });
  });

  // A re-rendered partial may show other runs (a new one, another page): watch those.
  document.body.addEventListener("htmx:afterSettle", () => {
    if (state.live) socket.send({type: "watch", runs: shown(), all: everything});
  });

  setInterval(() => {
    state.ticks += 1;
    if (!state.live || socket.state !== "live") refresh("poll");
    else if (pending) refresh(pending);
  }, pollMs);
})();
