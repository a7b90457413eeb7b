"""A real HTTP endpoint for webhook tests: it refuses (503) while `refusing` is set, then
accepts (200), and keeps every request it got. Hostile modes: `cookie` (a Set-Cookie on
every answer) and `endless` (a 500 whose body never ends: it writes until the client
hangs up, or ENDLESS_CAP bytes; `sent` counts them)."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ENDLESS_CAP = 64 * 2**20  # a bound for a client that reads it all: the test then fails, not hangs


@dataclass
class Received:
    headers: dict
    body: bytes
    answered: int
    at: float = field(default_factory=time.time)


class Receiver:
    def __init__(self):
        self.refusing = True
        self.cookie: str | None = None
        self.endless = False
        self.sent = 0
        self.requests: list[Received] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                status = 500 if receiver.endless else 503 if receiver.refusing else 200
                with receiver.lock:
                    receiver.requests.append(Received(dict(self.headers), body, status))
                self.send_response(status)
                if receiver.cookie:
                    self.send_header("set-cookie", f"{receiver.cookie}; Path=/")
                if receiver.endless:
                    self.end_headers()
                    self.answer_forever()
                    return
                answer = b"down for maintenance" if status == 503 else b'{"ok": true}'
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def answer_forever(self):
                chunk = b"x" * 65536
                # until the client hangs up (OSError): what a client that clips does
                with contextlib.suppress(OSError):
                    while receiver.sent < ENDLESS_CAP:
                        self.wfile.write(chunk)
                        receiver.sent += len(chunk)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def accepted(self) -> list[Received]:
        with self.lock:
            return [r for r in self.requests if r.answered == 200]

    def refused(self) -> list[Received]:
        with self.lock:
            return [r for r in self.requests if r.answered != 200]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
