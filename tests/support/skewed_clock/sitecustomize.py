"""A wall clock AGENTOPS_TEST_CLOCK_SKEW seconds off, for the processes of one worker host
in the fleet tests (tests/fleet/test_clock_skew.py: this directory first on the host's
PYTHONPATH, so that Python imports this module at start-up, before anything reads the
time). It moves time.time() and time.time_ns(), which the engine, the worker and the
stores read; the monotonic clocks stay, as a wrong wall clock leaves them. datetime's
now() reads the C library's clock and is not moved: nothing on a worker's lease or
timer path reads it (runs/storage/clock.py)."""

import os
import time

_SKEW = float(os.environ.get("AGENTOPS_TEST_CLOCK_SKEW") or 0)

if _SKEW:
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _SKEW
    time.time_ns = lambda: _time_ns() + int(_SKEW * 1e9)
