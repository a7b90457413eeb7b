"""Live sockets held open while a test stops the server under them."""

from __future__ import annotations

import asyncio
import json

from tests.chaos.wsclient import Closed, WebSocket


def close_codes(port: int, cookie: str, sockets: dict[str, dict], on_open) -> list[int | None]:
    """Open each socket (path: its first message), call on_open() once all are
    answered, and return the close code each got (None: dropped without one)."""
    async def hold(path: str, hello: dict, ready: asyncio.Event, opened: list) -> int | None:
        socket = await WebSocket.connect("127.0.0.1", port, path, {
            "Cookie": cookie, "Origin": f"http://127.0.0.1:{port}"})
        await socket.send_text(json.dumps(hello))
        assert json.loads(await socket.receive())["type"] in ("welcome", "watching")
        opened.append(path)
        if len(opened) == len(sockets):
            ready.set()
        try:
            while True:
                await socket.receive()
        except Closed as closed:
            return closed.code

    async def main():
        ready, opened = asyncio.Event(), []
        held = [asyncio.ensure_future(hold(path, hello, ready, opened))
                for path, hello in sockets.items()]
        await asyncio.wait_for(ready.wait(), 30)
        on_open()
        return await asyncio.wait_for(asyncio.gather(*held), 30)

    return asyncio.run(main())
