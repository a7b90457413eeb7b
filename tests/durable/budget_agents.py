"""Agents and a metered tool for the budget contract (tests/durable/budget_contract.py),
in a registry of their own: parallel groups of model calls of 1,000 tokens each."""

from __future__ import annotations

import threading
import time
from collections import Counter

from runs.durable import Agent, AgentRegistry, Call, Done, Retry, TransientToolError, agent, tool

BUDGET_REG = AgentRegistry()
PROMPT, COMPLETION = 800, 200  # 1,000 tokens a call
LATENCY = 0.2  # seconds a call takes: long enough for a group's calls to overlap
COMPANY_DEADLINE = 10.0


class Provider:
    """The model's side: the calls it answered (by prompt) and how many at once."""

    def __init__(self):
        self._lock = threading.Condition()
        self.made: Counter = Counter()
        self.running = 0
        self.most = 0
        self.done = 0
        self.failed: Counter = Counter()

    def answer(self, prompt: str, company: bool) -> None:
        with self._lock:
            self.made[prompt] += 1
            self.running += 1
            self.most = max(self.most, self.running)
            self._lock.notify_all()
            # once a call is done (the first goes alone: its cost is not known yet), wait
            # (bounded) for another call to be in flight beside this one
            company = company and self.done > 0
            if company:
                self._lock.wait_for(lambda: self.most >= 2, COMPANY_DEADLINE)
        if not company:
            time.sleep(LATENCY)
        with self._lock:
            self.running -= 1
            self.done += 1


PROVIDER = Provider()


def reset() -> None:
    global PROVIDER
    PROVIDER = Provider()


def usage(result, arguments) -> dict:
    return {"model": "test-model", "prompt_tokens": PROMPT, "completion_tokens": COMPLETION}


@tool(idempotent=True, meter=usage, name="budget.model")
def model(prompt: str, company: bool = False, *, idempotency_key: str) -> dict:
    PROVIDER.answer(prompt, company)
    return {"text": f"answer to {prompt}"}


@tool(idempotent=True, meter=usage, name="budget.flaky_model",
      retry=Retry(initial_interval=0.01, maximum_attempts=3, jitter=0))
def flaky_model(prompt: str, *, idempotency_key: str) -> dict:
    """Its first attempt for each prompt fails (a 503), the next one answers."""
    if not PROVIDER.failed[prompt]:
        PROVIDER.failed[prompt] += 1
        raise TransientToolError("503 from the model")
    PROVIDER.answer(prompt, False)
    return {"text": f"answer to {prompt}"}


@agent("fan", registry=BUDGET_REG)
class Fan(Agent):
    """`calls` model calls at once (ctx.parallel, or ctx.map with how="map"; how="flaky":
    a model whose first attempts fail), then done.
    With company=True the calls after the first wait for one another (a group whose
    calls run one at a time takes COMPANY_DEADLINE a call)."""

    def start(self, inputs):
        return {"calls": inputs.get("calls", 6), "how": inputs.get("how", "parallel"),
                "company": inputs.get("company", False)}

    def step(self, ctx, state):
        prompts = [f"q{n}" for n in range(state["calls"])]
        if state["how"] == "map":
            answers = ctx.map(model, prompts)
        elif state["how"] == "flaky":
            answers = ctx.map(flaky_model, prompts)
        else:
            answers = ctx.parallel([Call(model, p, state["company"]) for p in prompts])
        return Done({"answers": [a["text"] for a in answers]})
