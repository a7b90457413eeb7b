/* A websocket that stays up: reconnects with backoff after a network drop, a
 * server restart or a laptop sleep, notices a half-open socket by a heartbeat,
 * and shows its state in #live-indicator (data-state: connecting | live |
 * reconnecting | offline | closed).
 *
 *   const live = new LiveSocket("/ws/runs/abc/", {
 *     onOpen(live) { live.send({type: "hello", after: lastSeq}); },
 *     onMessage(message, live) { ... },
 *   });
 */
(function () {
  "use strict";

  const HEARTBEAT_MS = 15000;      // send a ping this often
  const SILENCE_MS = 40000;        // no frame for this long: the socket is dead
  const MAX_DELAY_MS = 10000;
  const SERVICE_RESTART = 4012;    // close code of a stopping server (runs/live/shutdown.py)

  function backoff(attempt) {
    const base = Math.min(MAX_DELAY_MS, 300 * Math.pow(2, attempt));
    return base / 2 + Math.random() * base / 2;   // "equal jitter"
  }

  class LiveSocket {
    constructor(path, handlers) {
      this.path = path;
      this.handlers = handlers || {};
      this.attempt = 0;
      this.socket = null;
      this.stopped = false;
      this.retryTimer = null;
      this.why = "";          // what the last retry was for, shown while the next one runs
      this.heartbeat = null;
      this.lastFrameAt = Date.now();
      this.note = "";   // shown instead of "live" while the connection is up (e.g. "stalled")
      this.state = "connecting";
      this.indicator = document.getElementById("live-indicator");
      window.addEventListener("online", () => this.reconnectNow());
      window.addEventListener("offline", () => this.setState("offline"));
      document.addEventListener("visibilitychange", () => {
        if (document.visibilityState === "visible") this.checkAlive();
      });
      window.addEventListener("pagehide", () => this.stop());
      window.addEventListener("pageshow", (event) => {   // back from the bfcache
        if (event.persisted) { this.stopped = false; this.attempt = 0; this.connect(); }
      });
      this.connect();
    }

    url() {
      const scheme = window.location.protocol === "https:" ? "wss" : "ws";
      return scheme + "://" + window.location.host + this.path;
    }

    connect() {
      if (this.stopped) return;
      clearTimeout(this.retryTimer);
      // A retry keeps saying why it retries ("server restarting") while it tries: the
      // indicator does not flicker to a bare "reconnecting…" at every attempt.
      if (this.attempt === 0) this.setState("connecting");
      else this.setState("reconnecting", this.why);
      let socket;
      try {
        socket = new WebSocket(this.url());
      } catch (err) {
        this.scheduleRetry();
        return;
      }
      this.socket = socket;
      let opened = false;
      socket.onopen = () => {
        if (socket !== this.socket) return;
        opened = true;
        this.lastFrameAt = Date.now();
        this.startHeartbeat();
        if (this.handlers.onOpen) this.handlers.onOpen(this);
      };
      socket.onmessage = (event) => {
        if (socket !== this.socket) return;
        this.lastFrameAt = Date.now();
        let message;
        try { message = JSON.parse(event.data); } catch (err) { return; }
        if (message.type === "pong") return;
        if (message.type === "welcome" || message.type === "watching") {
          this.attempt = 0;
          this.setState("live");
        }
        if (message.type === "error" && window.console) console.warn("live:", message.error);
        if (this.handlers.onMessage) this.handlers.onMessage(message, this);
      };
      socket.onclose = (event) => {
        if (socket !== this.socket) return;
        this.stopHeartbeat();
        this.socket = null;
        if (this.handlers.onClose) this.handlers.onClose(event, this);
        // How the last open connection ended (attempts that never opened say 1006).
        if (opened && this.indicator) this.indicator.dataset.closeCode = String(event.code);
        if (event.code === 4401 || event.code === 4404) {   // logged out, or not ours
          this.setState("closed", event.code === 4401 ? "logged out" : "not available");
          this.stopped = true;
          return;
        }
        // 4012 "service restart": the server is stopping (a deploy); the next one, or
        // another behind the load balancer, is there at once: no backoff built up.
        if (event.code === SERVICE_RESTART) this.restarting = true;
        else if (opened) this.restarting = false;
        if (event.code === SERVICE_RESTART) this.attempt = 0;
        this.scheduleRetry(this.restarting ? "server restarting" : "");
      };
    }

    scheduleRetry(why) {
      if (this.stopped) return;
      this.why = why || "";
      const delay = backoff(this.attempt);
      this.attempt += 1;
      this.setState(navigator.onLine === false ? "offline" : "reconnecting",
                    (why ? why + " · " : "") + "retry in " + Math.ceil(delay / 1000) + " s");
      clearTimeout(this.retryTimer);
      this.retryTimer = setTimeout(() => this.connect(), delay);
    }

    reconnectNow() {
      if (this.stopped) return;
      if (this.socket && this.socket.readyState <= 1) return;
      this.attempt = 0;
      this.connect();
    }

    checkAlive() {
      if (!this.socket) { this.reconnectNow(); return; }
      if (Date.now() - this.lastFrameAt > SILENCE_MS) this.drop();
      else this.send({type: "ping"});
    }

    drop() {  // a socket that went silent (laptop sleep, dead NAT): replace it
      const socket = this.socket;
      this.socket = null;
      this.stopHeartbeat();
      if (socket) { try { socket.close(); } catch (err) { /* already gone */ } }
      this.scheduleRetry();
    }

    startHeartbeat() {
      this.stopHeartbeat();
      this.heartbeat = setInterval(() => {
        if (Date.now() - this.lastFrameAt > SILENCE_MS) this.drop();
        else this.send({type: "ping"});
      }, HEARTBEAT_MS);
    }

    stopHeartbeat() {
      clearInterval(this.heartbeat);
      this.heartbeat = null;
    }

    send(message) {
      if (this.socket && this.socket.readyState === WebSocket.OPEN) {
        this.socket.send(JSON.stringify(message));
        return true;
      }
      return false;
    }

    stop() {
      this.stopped = true;
      clearTimeout(this.retryTimer);
      this.stopHeartbeat();
      if (this.socket) { try { this.socket.close(1000); } catch (err) { /* gone */ } }
    }

    setNote(note) {   // the page says what to show instead of a green "live"
      this.note = note || "";
      this.setState(this.state, this.detail);
    }

    setState(state, detail) {
      this.state = state;
      this.detail = detail;
      if (!this.indicator) return;
      const labels = {connecting: "connecting…", live: "live", reconnecting: "reconnecting…",
                      offline: "offline", closed: "not live"};
      this.indicator.dataset.state = state;
      const text = this.indicator.querySelector(".live-text");
      const noted = state === "live" && this.note;
      this.indicator.classList.toggle("is-stalled", Boolean(noted));
      if (text) text.textContent = noted ? this.note
        : labels[state] + (detail && state !== "live" ? " · " + detail : "");
      this.indicator.title = noted ? "Connected, but the run is not moving: " + this.note
        : state === "live" ? "Live: updates arrive as they happen"
        : "Updates paused: " + (detail || state) + ". Nothing is lost; the page catches up.";
    }
  }

  // The page's own signal that a live update has been applied (docs/operator-live.md, "The
  // page's signal"), for browser tests and for support: `data-live-seq` on the element a
  // page's script drives is the last event number whose changes are all drawn there (the
  // run page, a row of the run list; the operator pages' server renders it on theirs), and
  // <body data-live-applied> counts the live updates the page has applied (a message drawn,
  // a partial fetched and swapped in). Written here only; the page scripts call these.
  function countApplied() {
    const body = document.body;
    body.dataset.liveApplied = String((parseInt(body.dataset.liveApplied, 10) || 0) + 1);
  }

  // `element` shows everything up to event `seq` (never lowered: an answer that comes late
  // is not drawn over a newer one).
  LiveSocket.drawnAt = function (element, seq) {
    const number = seq === null || seq === undefined ? NaN : Number(seq);
    if (!element || !Number.isInteger(number)) return;
    const drawn = parseInt(element.dataset.liveSeq, 10);
    if (!(drawn >= number)) element.dataset.liveSeq = String(number);
  };

  // A live update was applied: to `element`, up to event `seq`, when given.
  LiveSocket.applied = function (element, seq) {
    LiveSocket.drawnAt(element, seq);
    countApplied();
  };

  if (document.body && !document.body.dataset.liveApplied) document.body.dataset.liveApplied = "0";

  window.LiveSocket = LiveSocket;
})();
