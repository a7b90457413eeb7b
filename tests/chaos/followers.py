"""Websocket clients that follow runs as a browser tab would, through Daphne restarts.

Each follower logs in (a real session cookie from /login/), opens ws/runs/<id>/,
says hello with the last seq it has, and reconnects whenever the socket drops.
It records every event seq in the order received, so the audit can check that
it saw each event of its run exactly once, in order. The clients are the harness's
own small RFC 6455 client (tests/chaos/wsclient.py), all on one event loop in one
thread.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlparse

import httpx

from tests.chaos.wsclient import Closed, HandshakeError, WebSocket


def login(base_url: str, username: str, password: str) -> str:
    """The session cookie of a user who logged in through the login form."""
    with httpx.Client(base_url=base_url, timeout=10) as client:
        page = client.get("/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        response = client.post("/login/", data={"username": username, "password": password,
                                                "csrfmiddlewaretoken": token})
        if response.status_code != 302 or "sessionid" not in client.cookies:
            raise RuntimeError(f"login as {username} failed: HTTP {response.status_code}")
        return client.cookies["sessionid"]


@dataclass
class Follower:
    run_id: str
    seqs: list[int] = field(default_factory=list)
    last: int = 0
    connects: int = 0
    problems: list[str] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    open: bool = False

    def received(self, message: dict) -> None:
        if message.get("type") == "error":
            self.errors.append(message)
            return
        if message.get("type") != "events":
            return
        for event in message["events"]:
            seq = event["seq"]
            self.seqs.append(seq)
            if seq <= self.last:
                self.problems.append(f"event {seq} again (after {self.last})")
            elif seq != self.last + 1:
                self.problems.append(f"gap: event {seq} after {self.last}")
            self.last = max(self.last, seq)


class Followers:
    def __init__(self, base_url: str, session: str):
        self.base_url = base_url
        parts = urlparse(base_url)
        self.host, self.port = parts.hostname, parts.port
        self.session = session
        self.followers: dict[str, Follower] = {}
        self.stopping = False
        self.tasks: set[asyncio.Task] = set()  # a task nobody references may be collected
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="followers",
                                       daemon=True)
        self.thread.start()

    def follow(self, run_id: str) -> None:
        follower = self.followers[run_id] = Follower(run_id)
        self.loop.call_soon_threadsafe(self._start, follower)

    def _start(self, follower: Follower) -> None:
        task = self.loop.create_task(self._follow(follower))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def connected(self) -> int:
        return sum(1 for f in self.followers.values() if f.open)

    async def _follow(self, follower: Follower) -> None:
        headers = {"Cookie": f"sessionid={self.session}", "Origin": self.base_url}
        path = f"/ws/runs/{follower.run_id}/"
        while not self.stopping:
            try:
                socket = await WebSocket.connect(self.host, self.port, path, headers)
            except (TimeoutError, OSError, asyncio.IncompleteReadError):
                await asyncio.sleep(0.2)  # Daphne is restarting
                continue
            except HandshakeError as exc:
                follower.problems.append(f"handshake refused: HTTP {exc.status}")
                await asyncio.sleep(0.5)
                continue
            follower.open = True
            follower.connects += 1
            try:
                await socket.send_text(json.dumps({"type": "hello", "after": follower.last}))
                while not self.stopping:
                    follower.received(json.loads(await socket.receive()))
            except (Closed, OSError):
                pass
            finally:
                follower.open = False
                socket.close()
            await asyncio.sleep(0.1)

    def caught_up(self, heads: dict[str, int]) -> bool:
        return all(f.last >= heads.get(run_id, 0) for run_id, f in self.followers.items())

    def wait_caught_up(self, heads: dict[str, int], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.caught_up(heads):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    def stop(self) -> None:
        self.stopping = True

        async def finish():
            for task in list(self.tasks):
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            self.loop.stop()

        self.loop.call_soon_threadsafe(lambda: self.loop.create_task(finish()))
        self.thread.join(10)
