"""The engine's observer (runs/durable/observe.py) on the worker side: every hook
becomes metrics, spans and the log context.

Spans of one claim, all in the run's trace (tracing.py):

    claim <agent>            start: the claim began; end: the run was claimed and loaded
      step <n>               one step of the agent (replaying: it had logged effects to replay)
        <tool>               a call that happened (every attempt), or a replayed one
                             (agentops.effect.replayed = true, no duration)

The claim span ends at once, so a worker killed in the middle of a step has
already exported it (with the effects it finished), and the next claim's spans
join them in the same trace.
"""

from __future__ import annotations

import time

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import Event
from opentelemetry.trace import Status, StatusCode

from runs.durable import observe
from runs.durable import records as r
from runs.durable.context import Suspend
from runs.durable.errors import FencedError, InDoubtEffectError, ToolFailedError
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
        self.pipeline = tracing.pipeline()
        self.tracer = None if self.pipeline is None else self.pipeline.tracer
        self.started = time.time_ns()
        self.run_id = run.id
        self.epoch = session.epoch
        self.takeover = bool(session.crashed)
        self.worker = session.owner
        self.parent = None     # the claim span's context: the steps' parent
        self.parent_span = None  # its span context: an effect's parent outside a step
        self.step_span_context = None  # the step's span: the parent of its effects
        self.current_effect = None  # the call in progress (its span is recorded when it ends)
        self._tokens = logs.bind(run_id=run.id, branch=run.branch, worker=session.owner)
        if self.metrics:
            kind = "takeover" if self.takeover else "claim"
            metrics.CLAIMS.labels(self.agent, kind).inc()
            if self.takeover:
                metrics.TAKEOVERS.labels(self.agent).inc()
        if self.tracer is not None:
            self.run_context = owner.trace_context(self.tracer, run)

    def claimed(self, seconds: float) -> None:
        if self.metrics:
            metrics.CLAIM_SECONDS.observe(seconds)
        if self.tracer is not None:
            span = self.tracer.start_span(
                f"claim {self.agent}", context=self.run_context,
                start_time=self.started - int(seconds * 1e9), attributes={
                    "agentops.run.id": self.run_id, "agentops.epoch": self.epoch,
                    "agentops.worker": self.worker, "agentops.takeover": self.takeover})
            span.end()
            self.parent = trace.set_span_in_context(span)
            self.parent_span = span.get_span_context()

    def step(self, step_no: int, replaying: bool):
        return _Step(self, step_no, replaying)

    def effect_parent(self):
        """The span an effect's span goes under: its step's, else the claim's."""
        return self.step_span_context or self.parent_span

    def effect(self, record: r.EffectRecord):
        return _Effect(self, record)

    def replayed(self, record: r.EffectRecord) -> None:
        if self.metrics:
            metrics.REPLAYED.labels(record.tool).inc()
        if self.pipeline is not None:
            now = time.time_ns()
            parent = self.effect_parent()
            self.pipeline.record(record.tool, self.pipeline.child_of(parent), parent,
                                 kind=trace.SpanKind.CLIENT, start=now, end=now,
                                 attributes=_effect_attributes(self, record, replayed=True))

    def attempt_failed(self, record, error, retry_in) -> None:
        if self.metrics and retry_in is not None:
            metrics.RETRIES.labels(record.tool).inc()
        if self.current_effect is not None:
            self.current_effect.events.append(Event("attempt failed", {
                "agentops.effect.attempt": record.attempts,
                "exception.type": type(error).__name__, "exception.message": str(error)[:300],
                "agentops.retry_in": -1.0 if retry_in is None else float(retry_in)}))

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
        if self.tracer is not None and outcome in ENDINGS_THAT_FLUSH:
            tracing.flush()


class _Step:
    __slots__ = ("observer", "step_no", "replaying", "span", "tokens")

    def __init__(self, observer: SessionObserver, step_no: int, replaying: bool):
        self.observer, self.step_no, self.replaying = observer, step_no, replaying

    def __enter__(self):
        observer = self.observer
        self.tokens = logs.bind(step=self.step_no)
        if observer.tracer is not None:
            self.span = observer.tracer.start_span(
                f"step {self.step_no}", context=observer.parent, attributes={
                    "agentops.run.id": observer.run_id, "agentops.step": self.step_no,
                    "agentops.epoch": observer.epoch, "agentops.replaying": self.replaying})
            observer.step_span_context = self.span.get_span_context()
        return self

    def __exit__(self, kind, exc, tb):
        observer = self.observer
        logs.unbind(self.tokens)
        if observer.tracer is not None:
            if kind is not None:
                # Suspend, Stop and the engine's own errors end a step as well as a bug
                self.span.set_attribute("agentops.step.ended_by", kind.__name__)
                if isinstance(exc, Exception):
                    self.span.set_status(Status(StatusCode.ERROR, str(exc)[:300]))
            self.span.end()
            observer.step_span_context = None
        return False


class _Effect:
    __slots__ = ("observer", "record", "began", "tokens", "context", "parent", "started",
                 "events", "attached")

    def __init__(self, observer: SessionObserver, record: r.EffectRecord):
        self.observer, self.record = observer, record

    def __enter__(self):
        observer = self.observer
        self.tokens = logs.bind(effect_key=self.record.key)
        self.began = time.perf_counter()
        if observer.pipeline is not None:
            self.parent = observer.effect_parent()
            self.context = observer.pipeline.child_of(self.parent)
            self.events = []
            self.started = time.time_ns()
            observer.current_effect = self
            # current while the tool runs: an HTTP tool sends it downstream
            self.attached = otel_context.attach(tracing.current_as(self.context))
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
            metrics.EFFECT_SECONDS.labels(record.tool, outcome).observe(
                time.perf_counter() - self.began)
            if outcome == "done" and record.usage:
                _count_usage(observer.agent, record.usage)
        if observer.pipeline is not None:
            otel_context.detach(self.attached)
            observer.current_effect = None
            attributes = _effect_attributes(observer, record, replayed=False)
            attributes["agentops.effect.outcome"] = outcome
            status = tracing.UNSET
            if outcome in ("error", "in_doubt"):
                status = Status(StatusCode.ERROR, (record.error or {}).get("type", ""))
            observer.pipeline.record(record.tool, self.context, self.parent,
                                     kind=trace.SpanKind.CLIENT, attributes=attributes,
                                     events=self.events, status=status, start=self.started,
                                     end=time.time_ns())
        logs.unbind(self.tokens)
        return False


def _count_usage(agent: str, usage: dict) -> None:
    model = usage.get("model") or ""
    metrics.TOKENS.labels(agent, model, "input").inc(usage.get("prompt_tokens") or 0)
    metrics.TOKENS.labels(agent, model, "output").inc(usage.get("completion_tokens") or 0)
    metrics.COST.labels(agent, model).inc(usage.get("cost") or 0.0)


def _effect_attributes(observer: SessionObserver, record: r.EffectRecord, *,
                       replayed: bool) -> dict:
    return {"agentops.run.id": observer.run_id, "agentops.epoch": observer.epoch,
            "agentops.tool": record.tool, "agentops.effect.key": record.key,
            "agentops.effect.attempt": record.attempts, "agentops.effect.replayed": replayed,
            "agentops.effect.idempotent": record.idempotent, "agentops.step": record.step_no,
            "agentops.effect.seq": record.seq}


def install(*, metrics_on: bool = True, links=None) -> Observer:
    observer = Observer(metrics_on=metrics_on, links=links)
    observe.install(observer)
    return observer
