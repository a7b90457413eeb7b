"""The assistant agent: a tool-using chat agent over any OpenAI-compatible API (the
sandbox's scripted model by default) with search, calculator and note tools; a chat on
the run page (`conversation`). The pattern of every built-in agent is in
builtin_agents/agents.py."""

from __future__ import annotations

import json

from runs.durable import Agent, Call, Done, ToolFailedError, agent

from .tools import crawl as site
from .tools import research
from .tools.http import sandbox_url
from .tools.llm import chat_completion, default_base_url, default_model

SANDBOX = sandbox_url()


SYSTEM_PROMPT = (
    "You are a research assistant for a website. Use search_pages to find pages, calculator "
    "for any arithmetic and write_note to save what you found; then answer in a few sentences, "
    "citing the numbers your tools returned.")


CHAT_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["message"],
               "properties": {"message": {"type": "string", "maxLength": 8000},
                              "end": {"type": "boolean"}}}


@agent("assistant", version="2")
class Assistant(Agent):
    """A tool-using chat agent over an OpenAI-compatible API (scripted offline model by default)."""

    # Its model calls are metered: a run waits when it has spent this (the launch
    # form's budget field overrides it; docs/budgets.md).
    default_budget = {"cost": 0.25}
    # With approve_notes the owner says yes to each note, title and body shown, before
    # it is written; a denied note is an error the model sees (docs/approvals.md).
    approvals = ({"tool": research.write_note.name, "approvers": "owner", "fallback": "deny",
                  "when": "'approve_notes' in inputs and inputs.approve_notes"},)
    conversation = "messages"  # the run page shows them as a chat and takes follow-ups

    input_schema = {
        "type": "object",
        "properties": {
            "question": {"type": "string", "format": "textarea", "minLength": 1,
                         "description": "What to ask.",
                         "default": "Which pages mention a boat or the city, and how many "
                                    "are there?"},
            "follow_ups": {"type": "array", "items": {"type": "string", "minLength": 1},
                           "default": [], "description": "Further questions, asked in turn "
                                                         "after each answer (a JSON list)."},
            "base_url": {"type": "string", "default": default_base_url(),
                         "description": "OpenAI-compatible API base URL (…/v1). The API key "
                                        "comes from AGENTOPS_LLM_API_KEY on the worker."},
            "model": {"type": "string", "default": default_model()},
            "site_url": {"type": "string", "default": f"{SANDBOX}/site",
                         "description": "The site search_pages searches."},
            "site_pages": {"type": "integer", "minimum": 1, "default": 10_000},
            "latency_ms": {"type": "integer", "minimum": 0, "maximum": 10_000, "default": 20},
            "search_scan": {"type": "integer", "minimum": 1, "maximum": 2000, "default": 100,
                            "description": "How many pages (from page 0) a search reads."},
            "target_url": {"type": "string", "default": f"{SANDBOX}/api",
                           "description": "Where write_note stores notes (<target_url>/records)."},
            "max_turns": {"type": "integer", "minimum": 1, "maximum": 50, "default": 8,
                          "description": "Model calls per question before it must answer."},
            "approve_notes": {"type": "boolean", "default": False,
                              "description": "You approve each note (its title and body) "
                                             "before write_note stores it."},
            "chat": {"type": "boolean", "default": True,
                     "description": "After the last question, wait for the user's next "
                                    "message (a chat) instead of finishing."},
            "tool_concurrency": {"type": "integer", "minimum": 1, "maximum": 16, "default": 4,
                                 "description": "Tool calls of one model turn run at once."},
        },
    }

    tools = research.SPECS  # what the model may call (see plan_tool)

    def start(self, inputs):
        questions = [inputs["question"], *inputs["follow_ups"]]
        return {
            "inputs": inputs,
            "messages": [{"role": "system", "content": SYSTEM_PROMPT},
                         {"role": "user", "content": questions[0]}],
            "plan": {"questions": questions, "current": 0},
            "memory": [],   # what the tools returned, in short
            "pending": [],  # tool calls the model asked for: think → act
            "answers": [],
            "turns": 0,     # model calls for the current question
            "tool_calls": 0,
            "usage": {"prompt_tokens": 0, "completion_tokens": 0},
        }

    def step(self, ctx, state):
        if state.get("listening"):
            return self.listen(ctx, state)
        return self.act(ctx, state) if state["pending"] else self.think(ctx, state)

    def listen(self, ctx, state):
        """Wait (durably, holding no worker) for the user's next message."""
        said = ctx.wait_for_input("Your message to the assistant", schema=CHAT_SCHEMA)
        state["listening"] = False
        if said.get("end") and not said.get("message"):
            return Done(self.output(state))
        plan = state["plan"]
        plan["questions"].append(said["message"])
        state["messages"].append({"role": "user", "content": said["message"]})
        state["turns"] = 0
        if said.get("end"):
            state["inputs"] = {**state["inputs"], "chat": False}  # answer this one, then end
        return state

    def output(self, state) -> dict:
        answers = state["answers"]
        return {"answer": answers[-1]["answer"] if answers else "", "answers": answers,
                "memory": state["memory"], "tool_calls": state["tool_calls"],
                "usage": state["usage"]}

    def think(self, ctx, state):
        """Ask the model what to do next: call tools, or answer."""
        inputs = state["inputs"]
        state["turns"] += 1
        last_turn = state["turns"] >= inputs["max_turns"]
        tools = [] if last_turn else self.tools  # no tools on the last turn: it must answer
        reply = ctx.call(chat_completion, inputs["base_url"], inputs["model"], state["messages"],
                         tools)
        message = {"role": "assistant", **reply["message"]}
        state["messages"].append(message)
        for key in state["usage"]:
            state["usage"][key] += reply["usage"].get(key, 0)
        if message.get("tool_calls"):
            state["pending"] = message["tool_calls"]
            ctx.log("model calls " + ", ".join(c["function"]["name"] for c in state["pending"]))
            return state
        plan = state["plan"]
        state["answers"].append({"question": plan["questions"][plan["current"]],
                                 "answer": message.get("content") or ""})
        ctx.log(f"answer {plan['current'] + 1}/{len(plan['questions'])}: "
                f"{state['answers'][-1]['answer']}")
        ctx.progress(plan["current"] + 1, len(plan["questions"]))
        plan["current"] += 1
        if plan["current"] == len(plan["questions"]):
            if inputs.get("chat"):
                state["listening"] = True
                return state
            return Done(self.output(state))
        state["messages"].append({"role": "user", "content": plan["questions"][plan["current"]]})
        state["turns"] = 0
        return state

    def act(self, ctx, state):
        """Run the tool calls the model asked for, at once (ctx.parallel: their results
        in the order the model asked, on every replay); they go back as tool messages."""
        planned = [self.plan_tool(ctx, state, call) for call in state["pending"]]
        made = iter(ctx.parallel([p for p in planned if isinstance(p, Call)],
                                 max_concurrency=state["inputs"].get("tool_concurrency", 4),
                                 return_exceptions=True))
        for call, plan in zip(state["pending"], planned, strict=True):
            result = plan
            if isinstance(plan, Call):  # the model sees a tool's failure and may try again
                result = next(made)
                if isinstance(result, ToolFailedError):
                    result = {"error": result.message}
            state["tool_calls"] += 1
            state["memory"].append(remember(call["function"]["name"], result))
            state["messages"].append({"role": "tool", "tool_call_id": call["id"],
                                      "content": json.dumps(result)})
        state["pending"] = []
        return state

    def plan_tool(self, ctx, state, call: dict):
        """The Call a tool call of the model asks for, or the error the model gets back."""
        inputs, name = state["inputs"], call["function"]["name"]
        try:
            args = json.loads(call["function"]["arguments"] or "{}")
            if name == "search_pages":
                params = site.site_params(inputs["site_pages"], inputs["latency_ms"], 0.0)
                how = (research.search_pages, inputs["site_url"].rstrip("/"), params,
                       inputs["search_scan"], str(args["query"]))
            elif name == "calculator":
                how = (research.calculator, str(args["expression"]))
            elif name == "write_note":
                how = (research.write_note, inputs["target_url"].rstrip("/"),
                       f"{ctx.run_id}-note-{call['id']}", str(args["title"]), str(args["body"]))
            else:
                return {"error": f"there is no tool named {name!r}"}
        except (ValueError, KeyError, TypeError) as exc:  # the model sent bad arguments
            return {"error": f"bad arguments for {name}: {exc}"}
        return Call(*how)


def remember(name: str, result) -> str:
    """One line of working memory from a tool result."""
    if "error" in result:
        return f"{name} failed: {result['error']}"
    if name == "search_pages":
        top = result["hits"][0]["title"] if result["hits"] else "none"
        return f"search '{result['query']}': {result['count']} pages match, top: {top}"
    if name == "calculator":
        return f"calculator: {result['expression']} = {result['result']}"
    return f"note {result['id']}: {result['title']}"
