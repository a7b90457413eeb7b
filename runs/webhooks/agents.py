"""The system agent that delivers one webhook (autodiscovered as this app's agents
module). Its run is the delivery's durable retry loop: the attempt is a tool call under
a retry policy, so a wait longer than a second is a durable timer (the run waits, no
worker or slot is held, a crash or deploy changes nothing), and the attempts are the
run's `attempt` events. The run whose event is delivered is never involved."""

from __future__ import annotations

from django.conf import settings

from runs.durable import Agent, Done, Retry, ToolFailedError, agent, tool

from . import sending

DELIVERY_AGENT = "webhook_delivery"
conf = settings.WEBHOOKS
DELIVERY_RETRY = Retry(initial_interval=conf["RETRY_INITIAL"], backoff_coefficient=2.0,
                       maximum_interval=conf["RETRY_MAX_INTERVAL"], maximum_attempts=None,
                       maximum_elapsed=conf["RETRY_FOR"], jitter=0.1)


@tool(idempotent=True, retry=DELIVERY_RETRY, name="webhooks.deliver")
def deliver(delivery_id: int, run_id: str, *, idempotency_key: str) -> dict:
    """Idempotent: every attempt carries the same webhook-id, on which receivers dedup."""
    from .models import Delivery

    owner = Delivery.objects.filter(pk=delivery_id).values_list("delivery_run_id", flat=True)
    if owner.first() != run_id:  # only the run the dispatcher launched delivers
        return {"skipped": "not this run's delivery"}
    return sending.attempt(delivery_id)


@tool(idempotent=True, name="webhooks.give_up")
def give_up(delivery_id: int, run_id: str, reason: str, *, idempotency_key: str) -> None:
    from .models import Delivery

    if Delivery.objects.filter(pk=delivery_id, delivery_run_id=run_id).exists():
        sending.give_up(delivery_id, reason)


@agent(DELIVERY_AGENT, version="1")
class WebhookDelivery(Agent):
    """Deliver one webhook event to one subscription, retrying with backoff."""

    system = True
    input_schema = {"type": "object", "required": ["delivery"],
                    "properties": {"delivery": {"type": "integer", "minimum": 1}}}

    def step(self, ctx, state):
        delivery = state["delivery"]
        try:
            result = ctx.call(deliver, delivery, ctx.run_id)
        except ToolFailedError as failure:  # refused, or retried for RETRY_FOR in vain
            ctx.call(give_up, delivery, ctx.run_id, failure.message)
            return Done({"delivered": False, "error": failure.message})
        return Done({"delivered": "skipped" not in result, **result})
