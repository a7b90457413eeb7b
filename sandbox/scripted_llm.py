"""A scripted chat model: plays a realistic tool-using conversation offline.

The assistant agent offers ``search_pages(query)``, ``calculator(expression)``
and ``write_note(title, body)``. After the last user message the model, in turn:

1. calls ``search_pages`` with a query made of the question's content words;
2. calls ``calculator`` with ``"<hits> * 2"``, hits being the number of search
   results;
3. calls ``write_note`` summarising the search and the calculation;
4. answers (finish_reason ``stop``), quoting the calculator's result, the note
   id and the top hit.

Offered none of these but a ``transfer_to_<agent>`` tool (an OpenAI Agents SDK
hand-off), it calls that first, once.

Where it is in the script is read from the messages alone: the tool results
after the last user message, matched to the calls that asked for them. A step
whose tool is not in the request's ``tools`` is skipped. The same messages
always give the same response (ids are hashes of the request), so an agent run
replayed against this model sees exactly what it saw the first time.

Tool results are read leniently (JSON or text):
- search_pages: a list of hits, or an object with a list under ``hits``,
  ``results``, ``pages`` or ``items`` (and optionally ``count``/``total``);
  a hit's name is its ``title``, ``url``, ``page``, ``id`` or ``name``;
- calculator: a number, or an object with ``result``, ``value`` or ``answer``;
- write_note: an object with ``id`` or ``note_id``, or a bare id.
"""

import hashlib
import json
import re

from .openai_wire import ChatRequest, text_of

SCRIPT = ("search_pages", "calculator", "write_note")
HANDOFF_PREFIX = "transfer_to_"
_STOPWORDS_TEXT = """a an and are about can could did do does find for from give how i in is it
    many me much of on or please show tell that the this to was what when where which who why will
    with would you your"""
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())
MAX_QUERY_WORDS = 4


def complete(request: ChatRequest, *, created: int) -> dict:
    """The chat.completion response to ``request``."""
    digest = _request_digest(request)
    facts = _read_turn(request.messages)
    step = _next_step(request, facts)
    if step is None:
        message = {"role": "assistant", "content": _final_answer(facts), "refusal": None}
        finish_reason, completion_text = "stop", message["content"]
    else:
        message, completion_text = _tool_call(request, facts, step, digest)
        finish_reason = "tool_calls"
    prompt_tokens = _count_tokens(request)
    completion_tokens = len(completion_text.split()) + 1
    return {
        "id": "chatcmpl-" + digest[:24],
        "object": "chat.completion",
        "created": created,
        "model": request.model,
        "system_fingerprint": "fp_sandbox_scripted",
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _tool_call(request: ChatRequest, facts, step: str, digest: str) -> tuple[dict, str]:
    """The assistant message that calls the tool `step`, and its arguments' text."""
    arguments = json.dumps(_arguments(step, facts, request.tools.get(step, {})))
    call_id = "call_" + hashlib.sha256(f"{digest}:{step}".encode()).hexdigest()[:24]
    message = {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": step, "arguments": arguments},
            }
        ],
    }
    return message, arguments


def _request_digest(request: ChatRequest) -> str:
    canonical = json.dumps(
        [request.model, request.messages, sorted(request.tools), request.tool_choice],
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def _count_tokens(request: ChatRequest) -> int:
    # A rough stand-in for a tokenizer: whitespace-separated words.
    words = sum(len(text_of(m.get("content")).split()) for m in request.messages)
    return words + 4 * len(request.messages)


# --- reading the conversation ------------------------------------------------


def _read_turn(messages: list[dict]) -> dict:
    """What the conversation since the last user message has established."""
    last_user = (
        max(i for i, m in enumerate(messages) if m["role"] == "user")
        if any(m["role"] == "user" for m in messages)
        else -1
    )
    question = text_of(messages[last_user].get("content")) if last_user >= 0 else ""
    facts = {"question": question, "query": query_from(question), "results": {}, "args": {}}
    names = {}  # tool_call id -> (function name, its arguments)
    for message in messages[last_user + 1 :]:
        for call in message.get("tool_calls") or []:
            names[call["id"]] = (call["function"]["name"], call["function"]["arguments"])
        if message["role"] == "tool" and message.get("tool_call_id") in names:
            name, arguments = names[message["tool_call_id"]]
            facts["results"][name] = _parse_json(text_of(message.get("content")))
            facts["args"][name] = _parse_json(arguments)
    search = facts["results"].get("search_pages")
    facts["hits"], facts["top_hit"] = (
        _read_search(search) if "search_pages" in facts["results"] else (None, None)
    )
    if isinstance(facts["args"].get("search_pages"), dict):
        facts["query"] = facts["args"]["search_pages"].get("query", facts["query"])
    facts["expression"] = (facts["args"].get("calculator") or {}).get("expression")
    facts["calc"] = _read_value(facts["results"].get("calculator"), ("result", "value", "answer"))
    facts["note_id"] = _read_value(facts["results"].get("write_note"), ("id", "note_id"))
    return facts


def query_from(question: str) -> str:
    """A search query from a question: its first few content words."""
    words = [w for w in re.findall(r"[a-z0-9]+", question.lower()) if w not in STOPWORDS]
    return " ".join(words[:MAX_QUERY_WORDS]) or question.strip()[:64]


def _parse_json(text: str):
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def _read_search(result) -> tuple[int, str | None]:
    hits, count = result, None
    if isinstance(result, dict):
        hits = next(
            (
                result[k]
                for k in ("hits", "results", "pages", "items")
                if isinstance(result.get(k), list)
            ),
            [],
        )
        count = next(
            (result[k] for k in ("count", "total") if isinstance(result.get(k), int)), None
        )
    elif isinstance(result, str):
        hits = [line.strip() for line in result.splitlines() if line.strip()]
    elif not isinstance(result, list):
        hits = []
    top = None
    if hits:
        first = hits[0]
        if isinstance(first, dict):
            top = next(
                (
                    str(first[k])
                    for k in ("title", "url", "page", "id", "name")
                    if first.get(k) is not None
                ),
                json.dumps(first, sort_keys=True),
            )
        else:
            top = str(first)
    return (count if count is not None else len(hits)), top


def _read_value(result, keys: tuple[str, ...]):
    if isinstance(result, dict):
        return next((result[k] for k in keys if k in result), None)
    if isinstance(result, str):
        return result.strip() or None
    return result


# --- deciding ------------------------------------------------------------------


def _next_step(request: ChatRequest, facts: dict) -> str | None:
    """The tool to call next, or None to answer."""
    choice = request.tool_choice
    if choice == "none":
        return None
    if isinstance(choice, dict):
        return choice["function"]["name"]
    for step in SCRIPT:
        if step in request.tools and step not in facts["results"]:
            return step
    if not any(step in request.tools for step in SCRIPT):
        # An agent without the script's tools that may hand off (the OpenAI Agents
        # SDK's transfer_to_<agent> tools): hand off, once.
        handoff = next((t for t in request.tools if t.startswith(HANDOFF_PREFIX)), None)
        if handoff is not None and handoff not in facts["results"]:
            return handoff
    if choice == "required":
        # Forced to call a tool although the script is done: note down again.
        return next((s for s in reversed(SCRIPT) if s in request.tools), next(iter(request.tools)))
    return None


def _arguments(step: str, facts: dict, function: dict) -> dict:
    hits = facts["hits"] if facts["hits"] is not None else 0
    if step == "search_pages":
        return {"query": facts["query"]}
    if step == "calculator":
        return {"expression": f"{hits} * 2"}
    if step == "write_note":
        return {"title": f"Research: {facts['query']}", "body": _summary(facts)}
    # A tool outside the script (only when tool_choice forces it): fill its
    # required string parameters with the query.
    properties = (function.get("parameters") or {}).get("properties", {})
    required = (function.get("parameters") or {}).get("required", [])
    return {
        name: facts["query"]
        for name in required
        if properties.get(name, {}).get("type") == "string"
    }


def _summary(facts: dict) -> str:
    parts = [f"Searched for '{facts['query']}'"]
    if facts["hits"] is not None:
        parts.append(f"found {facts['hits']} hits, top hit: {facts['top_hit'] or 'none'}")
    if facts["calc"] is not None:
        parts.append(f"{facts['expression'] or 'calculation'} = {facts['calc']}")
    return "; ".join(parts) + "."


def _final_answer(facts: dict) -> str:
    if not facts["results"]:
        return f"I have no tools to look into '{facts['query']}', so I cannot answer from sources."
    sentences = [f"I searched the pages for '{facts['query']}'"]
    if facts["hits"] is not None:
        sentences[0] += (
            f" and found {facts['hits']} hits; the top hit is {facts['top_hit'] or 'none'}"
        )
    if facts["calc"] is not None:
        sentences.append(
            f"The calculator says {facts['expression'] or 'the result'} = {facts['calc']}"
        )
    if facts["note_id"] is not None:
        sentences.append(f"I saved a note with id {facts['note_id']}")
    return ". ".join(sentences) + "."


# --- streaming -------------------------------------------------------------------

TOKEN = re.compile(r"\s*\S+|\s+")
ARGUMENT_PIECE = 16  # characters of a tool call's arguments per chunk


def tokens(text: str) -> list[str]:
    """The text in the pieces a model streams: a word with the space before it."""
    return TOKEN.findall(text)


def stream_chunks(completion: dict, *, include_usage: bool) -> list[dict]:
    """The chat.completion.chunk objects a stream=true request gets for ``completion``.

    Content comes a token at a time; a tool call comes as OpenAI sends one: its id
    and name in the first chunk, its arguments in pieces after it.
    """
    choice = completion["choices"][0]
    message = choice["message"]
    base = {"id": completion["id"], "object": "chat.completion.chunk",
            "created": completion["created"], "model": completion["model"],
            "system_fingerprint": completion["system_fingerprint"]}

    def chunk(delta, finish_reason=None):
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                     "finish_reason": finish_reason}]}

    chunks = [chunk({"role": "assistant", "content": "" if message["content"] else None})]
    for piece in tokens(message["content"] or ""):
        chunks.append(chunk({"content": piece}))
    for index, call in enumerate(message.get("tool_calls") or []):
        chunks.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                             "function": {"name": call["function"]["name"],
                                                          "arguments": ""}}]}))
        arguments = call["function"]["arguments"]
        for start in range(0, len(arguments), ARGUMENT_PIECE):
            piece = arguments[start:start + ARGUMENT_PIECE]
            chunks.append(chunk({"tool_calls": [{"index": index,
                                                 "function": {"arguments": piece}}]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append({**base, "choices": [], "usage": completion["usage"]})
    return chunks
