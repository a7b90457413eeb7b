"""The sandbox as a remote site for the benchmarks: Django's WSGI handler (the whole
middleware stack, the sandbox's own views and templates) behind a threaded HTTP/1.1
server with keep-alive, in a process of its own.

    python -m bench.site_server            prints its URL, serves until stdin closes

Why not Daphne, as the Procfile runs the app: on a 2-core machine Daphne's ASGI path
(a sync view behind sync middleware is three thread hand-offs per request) costs
about 5 ms of CPU a page, so at 8 pages in flight the *server* is what the crawl
measures (156 pages/s at most, measured with no engine at all). A site's speed is
not the engine's; this server spends less of the shared CPU per page, so that the
crawl's own concurrency is what the figure shows.
"""

from __future__ import annotations

import os
import signal
import socketserver
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

THREADS = 64  # a kept-alive connection holds its thread: more than the crawl opens
PROCESSES = int(os.environ.get("BENCH_SITE_PROCESSES", "2"))


class KeepAliveHandler(WSGIRequestHandler):
    protocol_version = "HTTP/1.1"
    # headers and body leave in separate writes: with Nagle's algorithm on, the body
    # waits for the client's delayed ACK (40 ms a request)
    disable_nagle_algorithm = True

    def log_message(self, *args):
        """No line per request: thousands a second would be the benchmark's noise."""

    def handle(self):
        # wsgiref answers one request a connection; loop as BaseHTTPRequestHandler does
        self.close_connection = True
        self.handle_one_request()
        while not self.close_connection:
            self.handle_one_request()

    def handle_one_request(self):
        from wsgiref.simple_server import ServerHandler

        self.raw_requestline = self.rfile.readline(65537)
        if not self.raw_requestline or len(self.raw_requestline) > 65536:
            self.close_connection = True
            return
        if not self.parse_request():
            return
        handler = ServerHandler(self.rfile, self.wfile, self.get_stderr(), self.get_environ(),
                                multithread=True)
        handler.http_version = "1.1"
        handler.request_handler = self
        handler.run(self.server.get_app())


class PooledWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    """Requests on a fixed pool of threads (each keeps its database connection)."""

    daemon_threads = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pool = ThreadPoolExecutor(THREADS, thread_name_prefix="site")

    def process_request(self, request, client_address):
        self.pool.submit(self.process_request_thread, request, client_address)


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
    import django
    from django.core.handlers.wsgi import WSGIHandler

    django.setup()
    server = PooledWSGIServer(("127.0.0.1", 0), KeepAliveHandler)
    server.set_app(WSGIHandler())
    # Processes that accept on the one socket: one Python process's GIL would queue
    # the pages' CPU (about 1.5 ms each) behind one another.
    children = []
    for _ in range(PROCESSES - 1):
        pid = os.fork()
        if pid == 0:
            server.serve_forever()
            os._exit(0)
        children.append(pid)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    sys.stdin.read()  # until the benchmark closes it
    for pid in children:
        os.kill(pid, signal.SIGKILL)
    # the pool's threads sit in kept-alive connections' reads: nothing to wait for
    os._exit(0)


if __name__ == "__main__":
    main()
