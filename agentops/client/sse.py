"""Server-sent events read line by line (the WHATWG event-stream format)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass
class Message:
    event: str
    data: str
    id: str | None
    retry: int | None = None


def messages(lines: Iterable[str]) -> Iterator[Message]:
    event, data, last_id, retry = "", [], None, None
    for line in lines:
        if line == "":
            if data or retry is not None:
                yield Message(event or "message", "\n".join(data), last_id, retry)
            event, data, retry = "", [], None
            continue
        if line.startswith(":"):
            continue  # a comment: the server's heartbeat
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
        elif name == "id" and "\0" not in value:
            last_id = value
        elif name == "retry" and value.isdigit():
            retry = int(value)
