"""A streaming tool's chunks, on their way to the run's viewers.

A streaming tool (`@tool(stream=True)`) is a generator. Its chunks become `stream`
events of the run, batched: the first chunk after a quiet spell goes out at once,
later ones at most every FLUSH_SECONDS, so a model sending 50 tokens a second costs
about ten event rows a second, not fifty. The last batch rides along with the
call's logged outcome (one commit). The logged result is what a replay sees; the
events are only for viewers.

Each event says which attempt it belongs to (`attempt`: the session's epoch and
the attempt number), where its text starts in that attempt (`offset`) and which
call it is (`key`, the idempotency key, which stays the same across attempts). A
viewer shows the text of the latest attempt of a key; an earlier attempt of that
key that never finished was cut short (a crash, a deploy, a failed attempt that is
retried) and is shown as discarded.

The generator runs in a reader thread of its own so that the step's thread, which
writes the batches, can keep to the schedule while the tool waits on the network.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import TYPE_CHECKING

from . import events

if TYPE_CHECKING:  # pragma: no cover
    from .host import StepHost
    from .records import EffectRecord

FLUSH_SECONDS = 0.1
MAX_EVENT_TEXT = 32_000  # characters in one event: a larger batch is split


def attempt_id(host: StepHost, record: EffectRecord) -> str:
    return f"{host.epoch}.{record.attempts}"


class _Done:
    def __init__(self, value):
        self.value = value


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


def drain(host: StepHost, record: EffectRecord, generator, *,
          flush_seconds: float | None = None):
    """Run a streaming tool's generator to its end, writing its chunks as events.

    Returns the generator's return value (or the chunks joined, if it returned
    None); raises what the generator raised, after writing what it yielded."""
    interval = FLUSH_SECONDS if flush_seconds is None else flush_seconds
    batch = _Batch(host, record)
    items: queue.Queue = queue.Queue()
    stop = threading.Event()
    reader = threading.Thread(target=_read, args=(generator, items, stop), daemon=True,
                              name=f"stream {record.key}")
    reader.start()
    last_flush = 0.0
    try:
        while True:
            timeout = None
            if batch.pending:
                timeout = max(0.0, last_flush + interval - time.monotonic())
            try:
                item = items.get(timeout=timeout)
            except queue.Empty:
                batch.write()
                last_flush = time.monotonic()
                continue
            if isinstance(item, str):
                batch.add(item)
                if time.monotonic() - last_flush >= interval:
                    batch.write()
                    last_flush = time.monotonic()
                continue
            batch.buffer()  # the rest goes with the outcome's commit
            if isinstance(item, _Failed):
                raise item.error
            return item.value if item.value is not None else batch.text()
    finally:
        stop.set()  # written no further (fenced, store failure): the reader stops pulling


def _read(generator, items: queue.Queue, stop: threading.Event) -> None:
    try:
        while not stop.is_set():
            try:
                chunk = next(generator)
            except StopIteration as done:
                items.put(_Done(done.value))
                return
            if chunk is None or chunk == "":
                continue
            items.put(chunk if isinstance(chunk, str) else str(chunk))
        generator.close()
    except BaseException as exc:  # noqa: BLE001 - the tool's failure, handed to the step
        items.put(_Failed(exc))


class _Batch:
    def __init__(self, host: StepHost, record: EffectRecord):
        self.host = host
        self.record = record
        self.attempt = attempt_id(host, record)
        self.offset = 0
        self.pending: list[str] = []
        self.parts: list[str] = []

    def add(self, chunk: str) -> None:
        self.pending.append(chunk)
        self.parts.append(chunk)

    def text(self) -> str:
        return "".join(self.parts)

    def _events(self) -> list[tuple[str, dict]]:
        text = "".join(self.pending).replace("\x00", "\ufffd")  # a jsonb row cannot hold NUL
        self.pending = []
        batches = []
        for start in range(0, len(text), MAX_EVENT_TEXT):
            piece = text[start:start + MAX_EVENT_TEXT]
            batches.append(events.stream(self.record, self.attempt, self.offset, piece))
            self.offset += len(piece)
        return batches

    def write(self) -> None:
        if self.pending:
            self.host.write_events(self._events())

    def buffer(self) -> None:
        if self.pending:
            for event in self._events():
                self.host.emit(event)
