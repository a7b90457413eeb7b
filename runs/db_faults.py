"""What a lost connection, a restarting or an unreachable database raise: the faults
that every layer (the pages, the API, the live sockets, the worker) waits out or
answers with "try again" (a 503 with Retry-After, a socket closed with 4013, a run
that takes itself back), where any other error stays a failure. A pool that cannot
hand out a connection in time raises OperationalError too.

Neutral ground: the web layers and the worker runtime both import it, and neither
imports the other for it."""

from django.db import InterfaceError, OperationalError

DATABASE_FAULTS = (OperationalError, InterfaceError)
