"""A target that takes a request and then drops the connection without an answer: the
call reached it, and nobody knows whether it was acted on (an in-doubt call)."""

import socket
import threading


class DroppingServer:
    """Accepts each connection, reads one request whole, closes without answering."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.requests: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            with conn:
                self.requests.append(_read_request(conn))

    def close(self):
        self.sock.close()
        self.thread.join(5)


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    while len(body) < length:
        body += conn.recv(65536)
    return body
