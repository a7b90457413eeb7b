"""The sandbox's generated site as a remote site for the benchmarks: its pages, as the
sandbox's views answer them (``sandbox.views.site.page_answer``, the same templates),
served by an asyncio HTTP/1.1 server with keep-alive in a process of its own.

    python -m bench.site_server            prints its URL, serves until stdin closes

Why not the app's own server: a remote site's CPU is not on the crawler's machine, and
on a 2-core machine the site's CPU a page is what a crawl at 8 pages in flight would
measure. Daphne (a sync view behind sync middleware is three thread hand-offs a
request) costs about 5 ms of CPU a page, Django's WSGI handler behind a threaded
server about 3 ms; this server costs under 1 ms (the page's content and template),
because it leaves out what a page of a remote site costs only the remote machine:
the middleware stack, a thread a request and a database read a request (the site's
generation is read at most every GENERATION_SECONDS, as a cache in front of a site
would; the benchmarks do not change it while they crawl). A page's latency is an
asyncio sleep, so 8 pages in flight are 8 timers, not 8 threads.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from http import HTTPStatus
from types import SimpleNamespace
from urllib.parse import unquote, urlsplit

from sandbox.errors import SandboxError  # plain Python: no Django set-up needed
from sandbox.http import int_param

GENERATION_SECONDS = 1.0
MAX_REQUEST_BYTES = 65536


class Site:
    """The routes of the sandbox's site that the crawl asks for."""

    def __init__(self):
        # imported once Django is set up (main), not at every request
        from django.http import QueryDict
        from django.template.loader import render_to_string
        from django.urls import reverse

        from sandbox import selectors, services
        from sandbox.views import site as views

        self.query_dict, self.render, self.views = QueryDict, render_to_string, views
        self.current_generation, self.page_hit = selectors.current_generation, services.page_hit
        self.page_prefix = reverse("sandbox:site_page", args=[0])[:-1]
        self.generation_path = reverse("sandbox:site_generation")
        self._generation, self._read_at = 0, float("-inf")

    def generation(self) -> int:
        if time.monotonic() - self._read_at >= GENERATION_SECONDS:
            self._generation, self._read_at = self.current_generation(), time.monotonic()
        return self._generation

    async def answer(self, target: str) -> tuple[int, str, bytes]:
        views = self.views
        path, _, query = target.partition("?")
        path = unquote(urlsplit(path).path)
        request = SimpleNamespace(GET=self.query_dict(query), headers={})
        try:
            pages, latency_ms, error_rate = views.request_params(request)
            if path == self.generation_path:
                since = int_param(request, "since", 0, low=0, high=10**9)
                body = views.generation_answer(pages, since, self.generation())
                return 200, "application/json", json.dumps(body).encode()
            number = path.removeprefix(self.page_prefix)
            if not path.startswith(self.page_prefix) or not (number.isascii() and number.isdigit()):
                return 404, "text/plain", b"not a page of the site\n"
            await asyncio.sleep(latency_ms / 1000)
            template, context, status = views.page_answer(
                int(number), pages, error_rate, query,
                generation=self.generation, hit=self.page_hit)
        except SandboxError as error:
            return error.status, "application/json", json.dumps(error.as_body()).encode()
        return status, "text/html; charset=utf-8", self.render(template, context).encode()


async def serve_connection(site: Site, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            method, target, _version = (lines[0].split(" ") + ["", "", ""])[:3]
            headers = {k.strip().lower(): v.strip() for k, _, v in
                       (line.partition(":") for line in lines[1:] if line)}
            if method != "GET" or "content-length" in headers:
                status, kind, body = 405, "text/plain", b"GET only\n"
            else:
                status, kind, body = await site.answer(target)
            close = headers.get("connection", "").lower() == "close"
            writer.write(
                f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
                f"Content-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                f"{'Connection: close' if close else 'Connection: keep-alive'}\r\n\r\n"
                .encode("latin-1") + body)
            await writer.drain()
            if close or status == 405:
                return
    finally:
        writer.close()


async def serve() -> None:
    site = Site()
    server = await asyncio.start_server(
        lambda r, w: serve_connection(site, r, w), "127.0.0.1", 0, limit=MAX_REQUEST_BYTES)
    port = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}", flush=True)
    loop = asyncio.get_running_loop()
    stdin_closed = loop.create_future()  # until the benchmark closes stdin
    threading.Thread(target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(
        stdin_closed.set_result, None)), daemon=True).start()
    await stdin_closed


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
    # The site's database reads (its generation, once a second; a flaky page's hit count)
    # run on the event loop: a stand-in site, not a server for users.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    import django

    django.setup()
    asyncio.run(serve())


if __name__ == "__main__":
    main()
