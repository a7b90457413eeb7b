"""The scripted model streams (stream=true, server-sent events), and the built-in LLM
tool reads any such stream back into the message a non-streamed call returns."""

import json

import pytest

from builtin_agents.tools.llm import Reply, chat_completion, endpoint
from sandbox.models import LlmCall
from sandbox.scripted_llm import tokens
from tests.sandbox.test_llm import TOOLS, URL

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = [{"role": "user", "content": "How many pages mention the gold mine?"}]


def sse_chunks(text: str) -> list:
    events = [block[len("data: "):] for block in text.split("\n\n") if block]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_a_streamed_completion_adds_up_to_the_unstreamed_one(http):
    body = {"model": "m", "messages": QUESTION, "tools": TOOLS}
    whole = http.post(URL, json=body).json()
    response = http.post(URL, json={**body, "stream": True,
                                    "stream_options": {"include_usage": True}})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    reply = Reply()
    for chunk in sse_chunks(response.text):
        assert chunk["object"] == "chat.completion.chunk" and chunk["id"] == whole["id"]
        reply.add(chunk)
    assert reply.result() == {"message": {k: v for k, v in whole["choices"][0]["message"].items()
                                          if k in ("role", "tool_calls") and v is not None},
                              "finish_reason": "tool_calls", "usage": whole["usage"]}


def test_an_answer_streams_a_token_at_a_time_and_is_counted_under_its_key(http):
    messages = QUESTION + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "search_pages", "arguments": "{\"query\": \"gold\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"count": 2, "hits": []})}]
    response = http.post(URL, json={"model": "m", "messages": messages, "stream": True},
                         headers={"Idempotency-Key": "run:1:2:0"})
    chunks = sse_chunks(response.text)
    pieces = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    text = "".join(p for p in pieces if p)
    assert len([p for p in pieces if p]) == len(tokens(text)) > 5
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert "usage" not in chunks[-1]  # only with stream_options.include_usage
    call = LlmCall.objects.get(key="run:1:2:0")
    assert call.streamed and call.completed_at is not None


@pytest.mark.parametrize("token_ms", ["-1", "abc", "999999"])
def test_a_bad_token_latency_is_a_400(http, token_ms):
    response = http.post(f"{URL}?token_ms={token_ms}",
                         json={"model": "m", "messages": QUESTION, "stream": True})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "token_ms"
    assert not LlmCall.objects.exists()


def test_the_tool_streams_the_answer_and_returns_the_whole_message(sandbox_url):
    messages = QUESTION + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "calculator", "arguments": "{\"expression\": \"2 * 2\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"result": 4})}]
    generator = chat_completion.fn(f"{sandbox_url}/llm/v1?token_ms=1", "scripted", messages,
                                   [], idempotency_key="k-stream")
    chunks = []
    try:
        while True:
            chunks.append(next(generator))
    except StopIteration as done:
        result = done.value
    assert len(chunks) > 5 and all(isinstance(c, str) for c in chunks)
    assert result["message"] == {"role": "assistant", "content": "".join(chunks)}
    assert "2 * 2 = 4" in result["message"]["content"]
    assert result["finish_reason"] == "stop" and result["usage"]["total_tokens"] > 0
    assert LlmCall.objects.filter(key="k-stream", streamed=True).count() == 1


def test_the_base_urls_query_string_is_kept():
    assert endpoint("https://x.example/openai/v1?api-version=2024", "chat/completions") == \
        "https://x.example/openai/v1/chat/completions?api-version=2024"
    assert endpoint("http://h/llm/v1/", "chat/completions") == "http://h/llm/v1/chat/completions"


def test_a_stream_cut_off_before_its_end_is_a_transient_error():
    from runs.durable import TransientToolError

    reply = Reply()
    reply.add({"choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]})
    assert reply.finish_reason is None  # the tool raises TransientToolError at the end then
    with pytest.raises(TransientToolError):
        reply.add({"error": {"message": "overloaded"}})
