"""The answers to a run that waits on a call or a person: an in-doubt call resolved
(done, retry, skip), the input a person gives, a retry now, or retries given up."""

from __future__ import annotations

from .. import clock, events
from .. import records as r
from ..errors import EffectNotFoundError, InputValidationError, InvalidTransitionError
from ..serde import check_serializable
from .act import act

RESOLUTIONS = ("done", "retry", "skip")


def resolve_effect(store, run_id: str, *, seq: int, resolution: str, actor: str, reason: str = "",
                   result=None) -> r.RunRecord:
    """The operator's answer to an in-doubt effect: it happened (with `result`), retry it
    with the same idempotency key, or skip it (the call returns `result`, default None)."""
    if resolution not in RESOLUTIONS:
        raise InputValidationError(f"resolution must be one of {', '.join(RESOLUTIONS)}",
                                   field="resolution")
    check_serializable(result, "result")

    def decide(run):
        attention = run.attention or {}
        if run.status != r.NEEDS_ATTENTION or attention.get("kind") != "in_doubt":
            raise InvalidTransitionError("resolve an effect of", run.status,
                                         "only a run with an in-doubt effect can be resolved")
        step_no = attention.get("step_no")
        effect = next((e for e in step_effects(store, run, step_no)
                       if e.seq == seq and e.status == r.INTENT), None)
        if effect is None:
            raise EffectNotFoundError(run_id, f"at step {step_no}, seq {seq}")
        if resolution == "retry":
            effect.ask_retry()
        else:
            effect.resolve(result, resolution, at=clock.now())
        return r.OperatorCommit(
            run=r.RunChanges(status=r.QUEUED, attention=None, crash_count=0), effects=[effect],
            events=[events.resolved(effect, resolution),
                    events.status(r.QUEUED, reason=f"resolved: {resolution}")],
            take_over=True)
    return act(store, run_id, "resolve", actor, reason, decide,
               details={"seq": seq, "resolution": resolution, "result": result})


def provide_input(store, run_id: str, *, value, actor: str) -> r.RunRecord:
    """A user's answer to wait_for_input, validated against the prompt's schema."""
    check_serializable(value, "input")

    def decide(run):
        waiting = run.attention or {}
        if run.status != r.WAITING or waiting.get("kind") != "input":
            raise InvalidTransitionError("answer", run.status, "the run is not waiting for input")
        schema = waiting.get("schema")
        if schema:
            _validate_answer(value, schema)
        effect = next((e for e in step_effects(store, run, waiting.get("step_no"))
                       if e.kind == r.INPUT and e.seq == waiting.get("seq")), None)
        if effect is None or effect.status != r.INTENT:
            raise InvalidTransitionError("answer", run.status, "the question was already answered")
        effect.answer(value, at=clock.now())
        return r.OperatorCommit(
            run=r.RunChanges(status=r.QUEUED, attention=None, wake_at=None), effects=[effect],
            events=[events.input_received(effect),
                    events.status(r.QUEUED, reason="input received")],
            take_over=True)
    return act(store, run_id, "input", actor, "", decide)


def retry_now(store, run_id: str, *, actor: str, reason: str = "") -> r.RunRecord:
    """Wake a run waiting to retry a call: its next attempt starts at once."""
    def decide(run):
        effect = _retrying_effect(store, run, "retry now")
        effect.wake(at=clock.now())
        return r.OperatorCommit(
            run=r.RunChanges(status=r.QUEUED, wake_at=None, attention=None), effects=[effect],
            events=[events.status(r.QUEUED, reason="retry now", tool=effect.tool)],
            take_over=True)
    return act(store, run_id, "retry_now", actor, reason, decide)


def give_up(store, run_id: str, *, actor: str, reason: str = "") -> r.RunRecord:
    """Stop retrying a call: it fails, and the agent sees a ToolFailedError (not a
    permanent one: the item may well exist) and decides, as after a spent policy."""
    def decide(run):
        effect = _retrying_effect(store, run, "give up on")
        last = effect.error or {}
        error = {"type": "RetryGivenUp", "permanent": False,
                 "message": f"an operator gave up after {effect.attempts} attempt(s); the last "
                            f"error: {last.get('type', 'Error')}: {last.get('message', '')}"}
        effect.give_up(error, at=clock.now())
        return r.OperatorCommit(
            run=r.RunChanges(status=r.QUEUED, wake_at=None, attention=None), effects=[effect],
            events=[events.resolved(effect, "give_up"),
                    events.status(r.QUEUED, reason="gave up retrying", tool=effect.tool)],
            take_over=True)
    return act(store, run_id, "give_up", actor, reason, decide)


def _retrying_effect(store, run, action: str) -> r.EffectRecord:
    waiting = run.attention or {}
    if run.status != r.WAITING or waiting.get("kind") != "retry":
        raise InvalidTransitionError(action, run.status, "the run is not waiting to retry a call")
    effect = next((e for e in step_effects(store, run, waiting.get("step_no"))
                   if e.seq == waiting.get("seq") and e.status == r.RETRYING), None)
    if effect is None:  # the attention names a call the log does not hold as retrying
        raise InvalidTransitionError(action, run.status, "no call of the run waits to be retried")
    return effect


def step_effects(store, run, step_no) -> list[r.EffectRecord]:
    """The live effects of the run's step `step_no` on its branch."""
    if not isinstance(step_no, int):
        return []
    return store.history(run.id, r.HistoryQuery(step=(run.branch, step_no))).effects


def _validate_answer(value, schema: dict) -> None:
    import jsonschema
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        raise InputValidationError(exc.message, field=".".join(map(str, exc.absolute_path))) from None
    except jsonschema.SchemaError as exc:
        raise InputValidationError(f"the prompt's schema is invalid: {exc.message}") from None
