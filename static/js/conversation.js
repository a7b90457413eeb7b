/* The conversation of a chat run: the answers being streamed, live.
 *
 * The transcript (#panel-conversation) is the server's, from the run's latest
 * checkpoint, and is swapped in by htmx when a checkpoint makes it stale. What
 * this draws is the text of streaming calls not yet in it, from the run's
 * `stream` events (runs/durable/streaming.py): per call (its key), per attempt,
 * the text at consecutive offsets, so each character is drawn once whether an
 * event comes from the page's first render (#stream-events) or the socket. A new
 * attempt of a key marks the earlier ones discarded: they were cut short (a
 * crash, a deploy, a retry) and the new one streams in their place. Once the
 * transcript holds a call's step, its streams are dropped: the transcript has the
 * attempt that counted. Text is only ever set with text nodes, never as HTML.
 */
(function () {
  "use strict";

  const root = document.getElementById("conversation-streams");
  if (!root) return;
  const form = document.getElementById("chat-form");
  const streams = new Map();   // key -> {step, el, attempts: [{id, el, body, next, done}]}

  function transcriptStep() {
    const panel = document.getElementById("panel-conversation");
    return panel ? parseInt(panel.dataset.step, 10) || 0 : 0;
  }

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function newAttempt(stream, id) {
    stream.attempts.forEach((a) => {
      if (!a.done && !a.discarded) {
        a.discarded = true;
        a.el.classList.add("is-discarded");
        a.el.dataset.state = "discarded";
        a.label.textContent = "assistant · discarded: cut short, answered again below";
      }
    });
    const item = el("div", "msg msg-assistant msg-streaming");
    item.dataset.attempt = id;
    item.dataset.state = "streaming";
    const label = el("span", "msg-role", "assistant · streaming…");
    const body = el("div", "msg-text");
    item.append(label, body);
    stream.el.appendChild(item);
    const attempt = {id: id, el: item, label: label, body: body, next: 0, done: false,
                     discarded: false};
    stream.attempts.push(attempt);
    return attempt;
  }

  function onStream(data) {
    const key = String(data.key || "");
    const step = Number(data.step);
    if (!key || !(step > transcriptStep())) return;
    let stream = streams.get(key);
    if (!stream) {
      stream = {step: step, el: el("div", "chat-stream"), attempts: []};
      stream.el.dataset.key = key;
      streams.set(key, stream);
      root.appendChild(stream.el);
    }
    const id = String(data.attempt || "");
    let attempt = stream.attempts[stream.attempts.length - 1];
    if (!attempt || attempt.id !== id) attempt = newAttempt(stream, id);
    const text = String(data.text || "");
    if (data.offset !== attempt.next) return;   // drawn already (or out of order: never both)
    attempt.body.appendChild(document.createTextNode(text));
    attempt.next += Array.from(text).length;     // code points, as the server counts
  }

  function onEffect(data) {
    const stream = streams.get(String(data.key || ""));
    if (!stream || data.status !== "done") return;
    const attempt = stream.attempts[stream.attempts.length - 1];
    if (!attempt || attempt.discarded) return;
    attempt.done = true;
    attempt.el.dataset.state = "done";
    attempt.el.classList.remove("msg-streaming");
    attempt.label.textContent = "assistant";
  }

  function prune() {
    const step = transcriptStep();
    for (const [key, stream] of streams) {
      if (stream.step <= step) { stream.el.remove(); streams.delete(key); }
    }
  }

  document.body.addEventListener("htmx:oobAfterSwap", (event) => {
    if (event.detail.target && event.detail.target.id === "panel-conversation") prune();
  });
  if (form) {
    form.addEventListener("htmx:afterRequest", (event) => {
      if (event.detail.elt === form && event.detail.successful) form.reset();
    });
  }

  window.Conversation = {
    apply(ev) {
      if (ev.kind === "stream") onStream(ev.data || {});
      else if (ev.kind === "effect") onEffect(ev.data || {});
    },
  };
  const first = document.getElementById("stream-events");
  JSON.parse(first ? first.textContent : "[]").forEach((ev) => window.Conversation.apply(ev));
})();
