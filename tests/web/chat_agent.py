"""A small chat agent for the conversation view's tests: it echoes each message back,
streamed a word at a time, after a tool call whose result is long (collapsed)."""

import json

from runs.durable import Agent, Done, agent, tool

SCHEMA = {"type": "object", "properties": {"message": {"type": "string"},
                                           "end": {"type": "boolean"}},
          "required": ["message"]}


@tool(idempotent=True, stream=True, name="tests.echo_words")
def echo_words(text: str, *, idempotency_key: str):
    for n, word in enumerate(text.split(" ")):
        yield word if n == 0 else " " + word
    return {"role": "assistant", "content": f"{text}"}


@tool(idempotent=True, name="tests.look_up")
def look_up(text: str, *, idempotency_key: str) -> dict:
    return {"text": text, "details": "x" * 1000}


@agent("echo_chat", version="1")
class EchoChat(Agent):
    """Echoes every message (a chat agent for tests)."""

    conversation = "messages"
    input_schema = {"type": "object", "properties": {"first": {"type": "string",
                                                               "default": "hello"}}}

    def start(self, inputs):
        return {"messages": [{"role": "system", "content": "echo"},
                             {"role": "user", "content": inputs["first"]}], "listening": False}

    def step(self, ctx, state):
        if state["listening"]:
            said = ctx.wait_for_input("message", schema=SCHEMA)
            if said.get("end"):
                return Done({"turns": len(state["messages"])})
            state["messages"].append({"role": "user", "content": said["message"]})
            state["listening"] = False
            return state
        question = state["messages"][-1]["content"]
        found = ctx.call(look_up, question)
        state["messages"].append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{len(state['messages'])}", "type": "function",
             "function": {"name": "look_up", "arguments": json.dumps({"text": len(question)})}}]})
        state["messages"].append({"role": "tool", "tool_call_id": f"c{len(state['messages']) - 1}",
                                  "content": str(found)})
        state["messages"].append(ctx.call(echo_words, f"you said: {question}"))
        state["listening"] = True
        return state


YES_OR_NO = {"type": "object", "properties": {"approve": {"type": "boolean"}},
             "required": ["approve"], "additionalProperties": False}


@agent("yes_or_no_chat", version="1")
class YesOrNoChat(Agent):
    """A chat whose one question takes no chat message: only {"approve": true|false}."""

    conversation = "messages"

    def start(self, inputs):
        return {"messages": []}

    def step(self, ctx, state):
        return Done(ctx.wait_for_input("approve?", schema=YES_OR_NO))
