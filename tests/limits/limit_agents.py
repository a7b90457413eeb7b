"""An agent of the limits' process test: `calls` model calls through the built-in LLM
tool (which counts against the "llm" limit) to the sandbox's scripted model, one per
step, so that a held call costs a replay of nothing."""

from builtin_agents.tools.llm import chat_completion, default_base_url, default_model
from runs.durable import Agent, Done, agent


@agent("chatter", version="1", input_schema={
    "type": "object",
    "properties": {"calls": {"type": "integer", "minimum": 1, "maximum": 100, "default": 2}},
})
class Chatter(Agent):
    def start(self, inputs):
        return {"i": 0, "n": inputs["calls"], "words": 0}

    def step(self, ctx, state):
        messages = [{"role": "user", "content": f"Say hello, number {state['i']}."}]
        reply = ctx.call(chat_completion, default_base_url(), default_model(), messages, [])
        state["words"] += len(str(reply["message"].get("content") or "").split())
        state["i"] += 1
        return Done({"calls": state["i"]}) if state["i"] >= state["n"] else state
