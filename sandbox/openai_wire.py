"""The OpenAI chat completions wire format: request validation, pure.

Only what the scripted model needs is kept from a request (``ChatRequest``);
anything malformed raises ``ChatRequestError`` carrying the offending ``param``,
which the view turns into OpenAI's ``{"error": {...}}`` body with status 400.
"""

import re
from dataclasses import dataclass, field

ROLES = {"system", "developer", "user", "assistant", "tool"}
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
TOOL_CHOICE_MODES = {"none", "auto", "required"}


class ChatRequestError(ValueError):
    """A malformed chat completions request (HTTP 400)."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param

    def as_body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": "invalid_request_error",
                "param": self.param,
                "code": None,
            }
        }


@dataclass
class ChatRequest:
    model: str
    messages: list[dict]
    tools: dict[str, dict] = field(default_factory=dict)  # name -> function definition
    tool_choice: str | dict = "auto"
    temperature: float = 1.0
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage: a last chunk with the usage


def text_of(content) -> str:
    """The text of a message's content: a string, null, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def parse_request(body) -> ChatRequest:
    """Validate a decoded request body the way the OpenAI API does (the parts we use)."""
    if not isinstance(body, dict):
        raise ChatRequestError("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ChatRequestError("you must provide a model parameter", "model")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ChatRequestError("stream must be a boolean", "stream")
    options = body.get("stream_options")
    if options is not None and (not isinstance(options, dict) or not stream):
        raise ChatRequestError("stream_options is only allowed with stream=true (an object)",
                               "stream_options")
    if body.get("n", 1) != 1:
        raise ChatRequestError("n must be 1", "n")
    temperature = body.get("temperature", 1.0)
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        raise ChatRequestError("temperature must be a number", "temperature")
    if not 0 <= temperature <= 2:
        raise ChatRequestError("temperature must be between 0 and 2", "temperature")
    tools = _parse_tools(body.get("tools"))
    messages = _parse_messages(body.get("messages"))
    tool_choice = _parse_tool_choice(body.get("tool_choice", "auto" if tools else "none"), tools)
    return ChatRequest(model, messages, tools, tool_choice, float(temperature), stream,
                       bool((options or {}).get("include_usage")))


def _parse_tools(tools) -> dict[str, dict]:
    if tools is None:
        return {}
    if not isinstance(tools, list):
        raise ChatRequestError("tools must be an array", "tools")
    parsed = {}
    for i, tool in enumerate(tools):
        param = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise ChatRequestError("each tool must be {'type': 'function', ...}", param)
        function = tool.get("function")
        if not isinstance(function, dict):
            raise ChatRequestError("a function tool needs a 'function' object", param)
        name = function.get("name")
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            raise ChatRequestError("function.name must match ^[a-zA-Z0-9_-]{1,64}$", param)
        if not isinstance(function.get("parameters", {}), dict):
            raise ChatRequestError("function.parameters must be a JSON Schema object", param)
        parsed[name] = function
    return parsed


def _parse_messages(messages) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise ChatRequestError("messages must be a non-empty array", "messages")
    declared_calls = set()  # tool_call ids announced by earlier assistant messages
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise ChatRequestError(f"each message needs a role, one of {sorted(ROLES)}", param)
        _check_content(message, param)
        if message["role"] == "assistant":
            declared_calls.update(_check_tool_calls(message.get("tool_calls"), param))
            if message.get("content") is None and not message.get("tool_calls"):
                raise ChatRequestError("an assistant message needs content or tool_calls", param)
        elif message["role"] == "tool":
            if message.get("tool_call_id") not in declared_calls:
                raise ChatRequestError(
                    "messages with role 'tool' must be a response to a preceding message "
                    "with 'tool_calls'",
                    param,
                )
        elif message.get("content") is None:
            raise ChatRequestError(f"a {message['role']} message needs content", param)
    return messages


def _check_content(message: dict, param: str) -> None:
    content = message.get("content")
    if content is None or isinstance(content, str):
        return
    if isinstance(content, list) and all(
        isinstance(part, dict) and isinstance(part.get("text", ""), str) for part in content
    ):
        return
    raise ChatRequestError("content must be a string or an array of content parts", param)


def _check_tool_calls(tool_calls, param: str) -> set[str]:
    if tool_calls is None:
        return set()
    if not isinstance(tool_calls, list):
        raise ChatRequestError("tool_calls must be an array", param)
    ids = set()
    for call in tool_calls:
        function = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(call.get("id") if function is not None else None, str)
            or not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not isinstance(function.get("arguments"), str)
        ):
            raise ChatRequestError(
                "each tool call needs an id and a function with a name and string arguments",
                param,
            )
        ids.add(call["id"])
    return ids


def _parse_tool_choice(choice, tools: dict) -> str | dict:
    if isinstance(choice, str):
        if choice not in TOOL_CHOICE_MODES:
            raise ChatRequestError(
                "tool_choice must be none, auto, required or a function", "tool_choice"
            )
        if choice == "required" and not tools:
            raise ChatRequestError("tool_choice 'required' needs tools", "tool_choice")
        return choice
    name = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
    if name not in tools:
        raise ChatRequestError("tool_choice names a function that is not in tools", "tool_choice")
    return {"type": "function", "function": {"name": name}}
