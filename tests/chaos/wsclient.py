"""A small RFC 6455 websocket client on asyncio streams: text messages, ping/pong, close.

The harness cannot use autobahn's asyncio client (Daphne's Twisted claims txaio in
this process) and adds no dependency for the rest, so it speaks the protocol itself:
an HTTP/1.1 upgrade with the session cookie and Origin a browser sends, then frames.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import struct

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
TEXT, BINARY, CLOSE, PING, PONG, CONTINUATION = 0x1, 0x2, 0x8, 0x9, 0xA, 0x0


class HandshakeError(Exception):
    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(message)


class Closed(Exception):
    def __init__(self, code: int | None):
        self.code = code
        super().__init__(f"websocket closed ({code})")


class WebSocket:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, host: str, port: int, path: str, headers: dict[str, str],
                      timeout: float = 10.0) -> WebSocket:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split()[1])
        if status != 101:
            writer.close()
            raise HandshakeError(status, f"handshake refused: {status_line}")
        got = {h.split(":", 1)[0].lower(): h.split(":", 1)[1].strip()
               for h in header_lines if ":" in h}
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        if got.get("sec-websocket-accept") != accept:
            writer.close()
            raise HandshakeError(status, "bad Sec-WebSocket-Accept")
        return cls(reader, writer)

    async def send_text(self, text: str) -> None:
        self._send_frame(TEXT, text.encode())
        await self.writer.drain()

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 65536:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.writer.write(head + mask + masked)

    async def receive(self) -> str:
        """The next text message; answers pings; raises Closed when the socket closes."""
        parts: list[bytes] = []
        while True:
            try:
                b1, b2 = await self.reader.readexactly(2)
                n = b2 & 0x7F
                if n == 126:
                    (n,) = struct.unpack("!H", await self.reader.readexactly(2))
                elif n == 127:
                    (n,) = struct.unpack("!Q", await self.reader.readexactly(8))
                mask = await self.reader.readexactly(4) if b2 & 0x80 else None
                payload = await self.reader.readexactly(n)
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                raise Closed(None) from exc
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            opcode = b1 & 0x0F
            if opcode == PING:
                self._send_frame(PONG, payload)
                continue
            if opcode == CLOSE:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                self.close()
                raise Closed(code)
            if opcode in (TEXT, BINARY, CONTINUATION):
                parts.append(payload)
                if b1 & 0x80:
                    return b"".join(parts).decode()

    def close(self) -> None:
        try:
            self._send_frame(CLOSE, struct.pack("!H", 1000))
        except Exception:
            pass
        self.writer.close()
