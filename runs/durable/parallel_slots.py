"""What a call of a parallel group (runs/durable/parallel.py) holds in its own thread: its
slot among the group's `max_concurrency`, and its group's stop. The call path asks here,
whoever makes the call: the slot is given back as the tool returns (attempts.py), and a
call waiting on a gate gives up once its group stopped (gatekeeper.py)."""

from __future__ import annotations

import threading
from contextlib import contextmanager


class NotStarted(Exception):
    """A call of a group that an engine stop kept from starting."""


class Slot:
    """One of a group's `max_concurrency` places, held by a call from before it starts
    until its tool returns: the limit is on calls to the world at once, and logging an
    outcome (a commit, queued behind the group's other commits) is not one."""

    def __init__(self, slots: threading.BoundedSemaphore):
        self.slots, self.held = slots, False

    def take(self) -> None:
        self.slots.acquire()
        self.held = True

    def give_back(self) -> None:
        if self.held:
            self.held = False
            self.slots.release()


_running = threading.local()  # the slot and group stop of the group call this thread makes


@contextmanager
def running(slot: Slot, stopped: threading.Event):
    """This thread makes a call of a group, holding `slot`; `stopped`: its group's stop."""
    _running.slot, _running.abort = slot, stopped
    try:
        yield
    finally:
        _running.slot = _running.abort = None


def call_returned() -> None:
    """The tool of the call this thread makes has returned (or failed): if it is a call
    of a parallel group, its slot goes to the group's next call now."""
    slot = getattr(_running, "slot", None)
    if slot is not None:
        slot.give_back()


def group_stopped() -> bool:
    """The parallel group of the call this thread makes had an engine stop (a call not
    started yet is not started)."""
    abort = getattr(_running, "abort", None)
    return abort is not None and abort.is_set()
