"""A chat agent's messages, shaped for the conversation view.

The transcript is the state of the run's latest checkpoint: what the agent holds,
so it has only the attempts that counted (a streamed answer cut short never
reached the state). Everything here is text for templates, which escape it.
"""

from __future__ import annotations

import json

from runs import selectors
from runs.durable import AgentNotFoundError, registry
from runs.models import Run

COLLAPSE_ABOVE = 400   # characters: longer tool arguments and results start collapsed
SHOWN_CHARS = 20_000   # of one message; the checkpoint viewer has the rest
ROLES = ("user", "assistant", "tool", "system", "developer")


def conversation_key(run: Run) -> str | None:
    """The state key of the run's messages, when its agent is a chat agent."""
    try:
        agent = registry.get(run.agent)
    except AgentNotFoundError:
        return None
    key = getattr(agent, "conversation", None)
    return key if isinstance(key, str) and key else None


def transcript(run: Run) -> dict:
    """{"messages": [...], "step": the checkpoint's step (0: none yet)}."""
    key = conversation_key(run)
    checkpoint = selectors.run_latest_checkpoint(run)
    if key is None or checkpoint is None:
        return {"messages": [], "step": 0}
    state = selectors.checkpoint_state(checkpoint)
    raw = state.get(key) if isinstance(state, dict) else None
    return {"messages": shape(raw if isinstance(raw, list) else []),
            "step": checkpoint.step_no}


def shape(messages: list) -> list[dict]:
    """Messages in order; each tool result placed under the call that asked for it."""
    shown, calls = [], {}
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            continue
        role = message["role"]
        if role == "tool":
            call = calls.get(str(message.get("tool_call_id")))
            result = _block(_text(message.get("content")))
            if call is not None and call["result"] is None:
                call["result"] = result
            else:
                shown.append({"role": "tool", "text": result["text"], "block": result})
            continue
        entry = {"role": role, "text": _clip(_text(message.get("content"))), "calls": []}
        for call in message.get("tool_calls") or []:
            if not isinstance(call, dict):
                continue
            function = call.get("function") if isinstance(call.get("function"), dict) else {}
            item = {"name": str(function.get("name", "?"))[:100],
                    "arguments": _block(_pretty(function.get("arguments"))), "result": None}
            calls[str(call.get("id"))] = item
            entry["calls"].append(item)
        if entry["text"] or entry["calls"]:
            shown.append(entry)
    return shown


def _text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return json.dumps(content, ensure_ascii=False)


def _pretty(arguments) -> str:
    text = _text(arguments)
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return text


def _clip(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + " …"


def _block(text: str) -> dict:
    text = _clip(_pretty(text))
    return {"text": text, "collapsed": len(text) > COLLAPSE_ABOVE,
            "summary": " ".join(text.split())[:120]}
