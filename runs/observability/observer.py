"""The engine's observer (runs/durable/observe.py) on the worker side: every hook
becomes metrics, spans and the log context.

Spans of one claim, all in the run's trace (tracing.py):

    claim <agent>            start: the claim began; end: the run was claimed and loaded
      step <n>               one step of the agent (replaying: it had logged effects to replay)
                             an event per effect: a call that happened (every attempt
                             in one), or a replayed one (agentops.effect.replayed = true)

Effects are events of their step's span, not spans of their own: a span per call cost a
no-op call 20-37% more (the SDK's span object, then its OTLP encoding, under the run's
interpreter lock), an event a few percent (docs/observability.md, "What it costs").
While a tool runs its step's span is current, so an HTTP tool sends it downstream.
Effects outside any step (on_resume's, which the log places at step -epoch) get a
span of that name, open until the next step begins or the claim ends.

The claim span ends at once, so a worker killed in the middle of a step has already
exported it (and its finished steps with their effects), and the next claim's spans
join them in the same trace.
"""

from __future__ import annotations

import threading
import time

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from runs.durable import observe
from runs.durable import records as r
from runs.durable.errors import FencedError, InDoubtEffectError, Suspend, ToolFailedError
from runs.observability import logs, metrics, tracing

# What an effect's outcome is called, from its record's status after the call.
# Exceptions a call leaves by as it should: a failure for the step, a durable wait, in doubt.
EXPECTED = (ToolFailedError, Suspend, InDoubtEffectError)
OUTCOMES = {r.DONE: "done", r.ERROR: "error", r.RETRYING: "retrying", r.INTENT: "in_doubt"}
# A deploy's hand-off and a failed store: the process may be about to exit. A run that
# ended: its trace is complete now, whatever becomes of the process (the sentinel may
# retire it), at the price of one export a finished run.
ENDINGS_THAT_FLUSH = ("handed_off", "abandoned", "succeeded", "failed", "cancelled")


class Observer(observe.Observer):
    """`metrics`: count in prometheus_client; `links`: where runs' trace contexts
    are kept (links.py); tracing is on when tracing.tracer() is (read per claim)."""

    def __init__(self, *, metrics_on: bool = True, links=None):
        self.metrics_on = metrics_on
        if links is None:
            from runs.observability.links import OrmTraceLinks
            links = OrmTraceLinks()
        self.links = links

    def session(self, session) -> observe.SessionObserver:
        return SessionObserver(self, session)

    def launched(self, run: r.RunRecord) -> None:
        if self.metrics_on:
            metrics.LAUNCHES.labels(run.agent).inc()
        tracer = tracing.tracer()
        if tracer is None:
            return
        # Under the request's span when there is one (middleware.py): the run joins
        # the caller's trace. Ended at once: the run's spans refer to it as parent.
        span = tracer.start_span(f"launch {run.agent}", attributes={
            "agentops.run.id": run.id, "agentops.agent": run.agent})
        span.end()
        self.links.put(run.id, tracing.traceparent_of(span.get_span_context()))

    def acted(self, action: str, run: r.RunRecord) -> None:
        if self.metrics_on:
            metrics.OPERATOR_ACTIONS.labels(action).inc()

    def trace_context(self, tracer, run: r.RunRecord):
        """The run's trace, made now if it has none yet (launched before tracing was
        on, or by a process that does not trace)."""
        traceparent = self.links.get(run.id)
        context = tracing.context_of(traceparent) if traceparent else None
        if context is not None:
            return context
        root = tracer.start_span(f"run {run.agent}", context=otel_context.Context(),
                                 attributes={"agentops.run.id": run.id})
        root.end()
        traceparent = self.links.put(run.id, tracing.traceparent_of(root.get_span_context()))
        return tracing.context_of(traceparent) or trace.set_span_in_context(root)


class SessionObserver(observe.SessionObserver):
    def __init__(self, owner: Observer, session):
        run = session.run
        self.agent = run.agent
        self.metrics = owner.metrics_on
        self.tracer = tracing.tracer()
        self.started = time.time_ns()
        self.run_id = run.id
        self.epoch = session.epoch
        self.takeover = bool(session.crashed)
        self.worker = session.owner
        self.effects = _EffectsSpan(self)  # the span effects are events of
        self._tokens = logs.bind(run_id=run.id, branch=run.branch, worker=session.owner)
        if self.metrics:
            kind = "takeover" if self.takeover else "claim"
            metrics.CLAIMS.labels(self.agent, kind).inc()
            if self.takeover:
                metrics.TAKEOVERS.labels(self.agent).inc()
        if self.tracer is not None:
            self.parent = owner.trace_context(self.tracer, run)  # the claim's, once claimed

    def claimed(self, seconds: float) -> None:
        if self.metrics:
            metrics.CLAIM_SECONDS.observe(seconds)
        if self.tracer is not None:
            span = self.tracer.start_span(
                f"claim {self.agent}", context=self.parent,
                start_time=self.started - int(seconds * 1e9), attributes={
                    "agentops.run.id": self.run_id, "agentops.epoch": self.epoch,
                    "agentops.worker": self.worker, "agentops.takeover": self.takeover})
            span.end()
            self.parent = trace.set_span_in_context(span)

    def step(self, step_no: int, replaying: bool):
        return _Step(self, step_no, replaying)

    def effect(self, record: r.EffectRecord):
        return _Effect(self, record)

    def replayed(self, record: r.EffectRecord) -> None:
        if self.metrics:
            metrics.REPLAYED.labels(record.tool).inc()
        if self.tracer is not None:
            self.effects.of(record).event(record.tool, _effect_event(
                record, replayed=True, outcome=OUTCOMES.get(record.status, record.status)))

    def attempt_failed(self, record, error, retry_in) -> None:
        if self.metrics and retry_in is not None:
            metrics.RETRIES.labels(record.tool).inc()
        if self.tracer is not None:
            self.effects.of(record).event("attempt failed", {
                "agentops.tool": record.tool, "agentops.effect.key": record.key,
                "agentops.effect.attempt": record.attempts,
                "exception.type": type(error).__name__, "exception.message": str(error)[:300],
                "agentops.retry_in": -1.0 if retry_in is None else float(retry_in)})

    def checkpoint(self, checkpoint: r.CheckpointRecord) -> None:
        if self.metrics:
            metrics.CHECKPOINT_BYTES.labels(self.agent).observe(checkpoint.size)

    def waiting(self, kind: str) -> None:
        if self.metrics:
            metrics.DURABLE_WAITS.labels(self.agent, kind).inc()

    def attention(self, kind: str) -> None:
        if self.metrics:
            metrics.ATTENTION.labels(self.agent, kind).inc()

    def ended(self, outcome: str) -> None:
        if self.metrics:
            metrics.SESSIONS.labels(self.agent, outcome).inc()
        logs.unbind(self._tokens)
        if self.tracer is not None:
            self.effects.close_outside()
            if outcome in ENDINGS_THAT_FLUSH:
                tracing.flush()


class _Open:
    """A span effects are events of, while it is open. Their events are kept here and
    added to the span as it ends, in one pass: an event only leaves with its span, so
    nothing sees them sooner, and added one after the other the SDK's work for each
    costs less than half of what it does between two commits of a run (measured:
    bench/effect_overhead.py, docs/observability.md)."""

    __slots__ = ("span", "context", "events")

    def __init__(self, span):
        # the span and the context it is current in (a tool's downstream parent)
        self.span, self.context = span, trace.set_span_in_context(span)
        self.events: list[tuple] = []  # appended from a parallel group's threads too

    def event(self, name: str, attributes: dict, timestamp: int | None = None) -> None:
        self.events.append((name, attributes, timestamp or time.time_ns()))

    def end(self) -> None:
        add_event = self.span.add_event
        for name, attributes, timestamp in self.events:
            add_event(name, attributes, timestamp=timestamp)
        self.span.end()


class _EffectsSpan:
    """Which span an effect's event goes on: its step's while a step runs, else a span
    of the effect's own step number (on_resume's effects, at step -epoch), opened by its
    first effect and ended when the next step begins or the claim ends."""

    __slots__ = ("observer", "current", "outside", "lock")

    def __init__(self, observer: SessionObserver):
        self.observer = observer
        self.current: _Open | None = None  # read by a parallel group's threads
        self.outside = False  # `current` is the span of effects outside a step
        self.lock = threading.Lock()  # a parallel group outside a step opens one span

    def open(self, step_no: int, attributes: dict, *, outside: bool = False) -> _Open:
        observer = self.observer
        span = observer.tracer.start_span(f"step {step_no}", context=observer.parent,
                                          attributes={"agentops.run.id": observer.run_id,
                                                      "agentops.step": step_no,
                                                      "agentops.epoch": observer.epoch,
                                                      **attributes})
        self.current, self.outside = _Open(span), outside
        return self.current

    def close(self) -> None:
        self.current, self.outside = None, False

    def close_outside(self) -> None:
        if self.outside:
            self.current.end()
            self.close()

    def of(self, record: r.EffectRecord) -> _Open:
        """The span `record`'s event goes on."""
        current = self.current
        if current is None:
            with self.lock:
                if self.current is None:
                    self.open(record.step_no, {"agentops.outside_steps": True}, outside=True)
                current = self.current
        return current


class _Step:
    __slots__ = ("observer", "step_no", "replaying", "open", "tokens", "attached")

    def __init__(self, observer: SessionObserver, step_no: int, replaying: bool):
        self.observer, self.step_no, self.replaying = observer, step_no, replaying

    def __enter__(self):
        observer = self.observer
        self.tokens = logs.bind(step=self.step_no)
        if observer.tracer is not None:
            observer.effects.close_outside()
            self.open = observer.effects.open(self.step_no,
                                              {"agentops.replaying": self.replaying})
            # current for the whole step on the run's thread: its calls there find it so
            # and attach nothing each (a parallel group's threads attach it per call)
            self.attached = otel_context.attach(self.open.context)
        return self

    def __exit__(self, kind, exc, tb):
        observer = self.observer
        logs.unbind(self.tokens)
        if observer.tracer is not None:
            otel_context.detach(self.attached)
            if kind is not None:
                # Suspend, Stop and the engine's own errors end a step as well as a bug
                span = self.open.span
                span.set_attribute("agentops.step.ended_by", kind.__name__)
                if isinstance(exc, Exception):
                    span.set_status(Status(StatusCode.ERROR, str(exc)[:300]))
            self.open.end()
            observer.effects.close()
        return False


class _Effect:
    __slots__ = ("observer", "record", "began", "tokens", "open", "started", "attached")

    def __init__(self, observer: SessionObserver, record: r.EffectRecord):
        self.observer, self.record = observer, record

    def __enter__(self):
        observer = self.observer
        self.tokens = logs.bind(effect_key=self.record.key)
        self.began = time.perf_counter()
        if observer.tracer is not None:
            self.open = observer.effects.of(self.record)
            self.started = time.time_ns()
            # current while the tool runs (its own thread's context, in a parallel
            # group too): an HTTP tool sends it downstream
            context = self.open.context
            self.attached = None if otel_context.get_current() is context \
                else otel_context.attach(context)
        return self

    def __exit__(self, kind, exc, tb):
        observer, record = self.observer, self.record
        outcome = OUTCOMES.get(record.status, record.status)
        if kind is not None and not issubclass(kind, EXPECTED):
            # Its outcome could not be logged (a newer owner holds the run, the store
            # failed): whatever the call did, the log does not say so, and the run's next
            # claim calls it again.
            outcome = "fenced" if issubclass(kind, FencedError) else "stopped"
        if observer.metrics:
            metrics.effect_seconds(record.tool, outcome).observe(time.perf_counter() - self.began)
            if outcome == "done" and record.usage:
                _count_usage(observer.agent, record.usage)
        if observer.tracer is not None:
            if self.attached is not None:
                otel_context.detach(self.attached)
            attributes = _effect_event(record, replayed=False, outcome=outcome)
            if outcome in ("error", "in_doubt"):
                attributes["exception.type"] = (record.error or {}).get("type", "")
            self.open.event(record.tool, attributes, self.started)
        logs.unbind(self.tokens)
        return False


def _count_usage(agent: str, usage: dict) -> None:
    model = usage.get("model") or ""
    metrics.TOKENS.labels(agent, model, "input").inc(usage.get("prompt_tokens") or 0)
    metrics.TOKENS.labels(agent, model, "output").inc(usage.get("completion_tokens") or 0)
    metrics.COST.labels(agent, model).inc(usage.get("cost") or 0.0)


def _effect_event(record: r.EffectRecord, *, replayed: bool, outcome: str) -> dict:
    """An effect's event, named after its tool: its key; only when they say something,
    its outcome (an event without one is a call that ended `done`, as nearly all do),
    the attempt that ended it when it was not the first, and `replayed` when the log
    answered it. The run, epoch and step are its span's. Each attribute costs the
    worker about 2 us to add and encode, and more in garbage collection
    (docs/observability.md, "What it costs")."""
    event = {"agentops.effect.key": record.key}
    if outcome != "done":
        event["agentops.effect.outcome"] = outcome
    if record.attempts > 1:
        event["agentops.effect.attempt"] = record.attempts
    if replayed:
        event["agentops.effect.replayed"] = True
    return event


def install(*, metrics_on: bool = True, links=None) -> Observer:
    observer = Observer(metrics_on=metrics_on, links=links)
    observe.install(observer)
    return observer
